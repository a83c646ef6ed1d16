#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/thread_annotations.h"
#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/runtime/device_transport.h"

namespace hypic::gpu {

namespace {

constexpr size_t kAlign = 256;
constexpr size_t kMinBlock = size_t{64} << 10;
// Free blocks kept for reuse, in bytes; past this a released block goes back to the driver.
constexpr size_t kMaxPooledBytes = size_t{1} << 30;

size_t AlignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Device memory of one device in power-of-two size classes (from 64 KiB), reused across
// entries: an entry's block goes back to the free list when its last view is released, so a
// steady stream of deliveries does not pay a cudaMalloc and a synchronising cudaFree each.
// Thread-safe; owned jointly by the transport and every block handed out.
class BlockPool : public std::enable_shared_from_this<BlockPool> {
 public:
  explicit BlockPool(int device) : device_(device) {}
  ~BlockPool() {
    ScopedDevice on(device_);
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) (void)cudaFree(p);
    }
  }
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  Result<std::shared_ptr<std::byte>> Take(size_t bytes) EXCLUDES(mu_) {
    const size_t size = std::bit_ceil(std::max(bytes, kMinBlock));
    void* p = nullptr;
    {
      MutexLock lock(&mu_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        pooled_bytes_ -= size;
      }
    }
    if (p == nullptr) {
      ScopedDevice on(device_);
      HYPIC_RETURN_IF_ERROR(on.status());
      HYPIC_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, size));
    }
    return std::shared_ptr<std::byte>(
        static_cast<std::byte*>(p),
        [pool = shared_from_this(), size](std::byte* b) { pool->Give(size, b); });
  }

 private:
  void Give(size_t size, void* p) EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      if (pooled_bytes_ + size <= kMaxPooledBytes) {
        free_[size].push_back(p);
        pooled_bytes_ += size;
        return;
      }
    }
    ScopedDevice on(device_);
    (void)cudaFree(p);
  }

  const int device_;
  Mutex mu_;
  std::map<size_t, std::vector<void*>> free_ GUARDED_BY(mu_);
  size_t pooled_bytes_ GUARDED_BY(mu_) = 0;
};

// The copies from one source: a stream on the combine device, one transfer at a time.
struct Lane {
  Mutex mu;
  cudaStream_t stream = nullptr;
};

class DeviceTransport final : public runtime::Transport {
 public:
  // `lanes`: one per device, then one for the host.
  DeviceTransport(int combine, std::vector<std::unique_ptr<Lane>> lanes)
      : combine_(combine), lanes_(std::move(lanes)), pool_(std::make_shared<BlockPool>(combine)) {}
  ~DeviceTransport() override {
    ScopedDevice on(combine_);
    for (const auto& lane : lanes_) {
      (void)cudaStreamSynchronize(lane->stream);
      (void)cudaStreamDestroy(lane->stream);
    }
  }

  Result<runtime::EntryPtr> Deliver(const runtime::EntryPtr& entry, int /*from*/) override {
    if (entry == nullptr) return Internal("transport: null entry");
    const auto devices = static_cast<int>(lanes_.size()) - 1;
    const std::vector<EntryTensor>& tensors = entry->tensors();
    std::vector<size_t> offsets;
    std::vector<std::vector<size_t>> by_lane(lanes_.size());
    size_t total = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorView& v = tensors[i].view;
      if (!v.IsContiguous()) return BadRequest("transport: non-contiguous entry tensor");
      int lane = devices;  // host memory
      if (v.memory() == MemoryKind::kDevice) {
        if (v.device() < 0 || v.device() >= devices) {
          return BadRequest("transport: a tensor on CUDA device " + std::to_string(v.device()) +
                            " of " + std::to_string(devices));
        }
        lane = v.device();
      }
      by_lane[static_cast<size_t>(lane)].push_back(i);
      offsets.push_back(total);
      total = AlignUp(total + v.NumBytes());
    }
    HYPIC_ASSIGN_OR_RETURN(std::shared_ptr<std::byte> block, pool_->Take(total));
    for (size_t l = 0; l < lanes_.size(); ++l) {
      if (by_lane[l].empty()) continue;
      HYPIC_RETURN_IF_ERROR(
          CopyLane(*lanes_[l], static_cast<int>(l), tensors, by_lane[l], offsets, block.get()));
    }
    auto out = std::make_shared<SegmentEntry>(entry->meta());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const EntryTensor& t = tensors[i];
      TensorView view(block.get() + offsets[i], t.view.dtype(), t.view.shape(), MemoryKind::kDevice,
                      combine_);
      HYPIC_RETURN_IF_ERROR(out->AddView(t.layer, t.kind, view, block));
    }
    return runtime::EntryPtr(std::move(out));
  }

 private:
  // Copies tensors `which` (all from this lane's source: device `source`, or the host when
  // `source` is the device count) into `block`, then waits for them.
  Status CopyLane(Lane& lane, int source, const std::vector<EntryTensor>& tensors,
                  const std::vector<size_t>& which, const std::vector<size_t>& offsets,
                  std::byte* block) {
    MutexLock lock(&lane.mu);
    ScopedDevice on(combine_);
    HYPIC_RETURN_IF_ERROR(on.status());
    const bool host = source == static_cast<int>(lanes_.size()) - 1;
    for (size_t i : which) {
      const TensorView& v = tensors[i].view;
      if (v.NumBytes() == 0) continue;
      std::byte* dst = block + offsets[i];
      if (host) {
        HYPIC_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(dst, v.data(), v.NumBytes(), cudaMemcpyHostToDevice, lane.stream));
      } else if (source == combine_) {
        HYPIC_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(dst, v.data(), v.NumBytes(), cudaMemcpyDeviceToDevice, lane.stream));
      } else {
        HYPIC_CUDA_RETURN_IF_ERROR(
            cudaMemcpyPeerAsync(dst, combine_, v.data(), source, v.NumBytes(), lane.stream));
      }
    }
    HYPIC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(lane.stream));
    return Status::Ok();
  }

  const int combine_;
  const std::vector<std::unique_ptr<Lane>> lanes_;
  const std::shared_ptr<BlockPool> pool_;
};

}  // namespace

Result<std::unique_ptr<runtime::Transport>> MakeDeviceTransport(int combine_device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    count = 0;
  }
  if (count == 0) return Unsupported("device transport: no CUDA device");
  if (combine_device < 0 || combine_device >= count) {
    return BadRequest("device transport: combine device " + std::to_string(combine_device) +
                      " of " + std::to_string(count));
  }
  ScopedDevice on(combine_device);
  HYPIC_RETURN_IF_ERROR(on.status());
  for (int d = 0; d < count; ++d) {
    int can = 0;
    if (d == combine_device) continue;
    HYPIC_CUDA_RETURN_IF_ERROR(cudaDeviceCanAccessPeer(&can, combine_device, d));
    if (can == 0) continue;
    const cudaError_t err = cudaDeviceEnablePeerAccess(d, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();  // not sticky: clear it
    } else {
      HYPIC_CUDA_RETURN_IF_ERROR(err);
    }
  }
  std::vector<std::unique_ptr<Lane>> lanes;
  for (int l = 0; l <= count; ++l) {
    auto lane = std::make_unique<Lane>();
    const cudaError_t err = cudaStreamCreateWithFlags(&lane->stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
      for (const auto& made : lanes) (void)cudaStreamDestroy(made->stream);
      return CudaStatus(err, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
    }
    lanes.push_back(std::move(lane));
  }
  return std::unique_ptr<runtime::Transport>(new DeviceTransport(combine_device, std::move(lanes)));
}

Result<runtime::EntryPtr> DownloadEntry(const SegmentEntry& entry) {
  auto out = std::make_shared<SegmentEntry>(entry.meta());
  for (const EntryTensor& t : entry.tensors()) {
    if (!t.view.IsContiguous()) return BadRequest("download: non-contiguous entry tensor");
    HYPIC_ASSIGN_OR_RETURN(TensorView dst,
                           out->AddTensor(t.layer, t.kind, t.view.dtype(), t.view.shape(),
                                          HostBuffer::Init::kUninitialized));
    if (t.view.NumBytes() == 0) continue;
    if (t.view.memory() == MemoryKind::kDevice) {
      ScopedDevice on(t.view.device());
      HYPIC_RETURN_IF_ERROR(on.status());
      HYPIC_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(dst.data(), t.view.data(), t.view.NumBytes(), cudaMemcpyDeviceToHost));
    } else {
      std::memcpy(dst.data(), t.view.data(), t.view.NumBytes());
    }
  }
  return runtime::EntryPtr(std::move(out));
}

}  // namespace hypic::gpu

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "core/thread_annotations.h"
#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/runtime/nccl_transport.h"

namespace hypic::gpu {

namespace {

Status NcclStatus(ncclResult_t r, const char* stmt, const char* file, int line) {
  if (r == ncclSuccess) return Status::Ok();
  // No fmt here: its consteval format strings do not compile under nvcc.
  return DeviceError(std::string(stmt) + " failed at " + file + ":" + std::to_string(line) + ": " +
                     ncclGetErrorString(r));
}
#define HYPIC_NCCL_RETURN_IF_ERROR(stmt) \
  HYPIC_RETURN_IF_ERROR(NcclStatus((stmt), #stmt, __FILE__, __LINE__))

// Device memory freed with its owner; the entry's views keep it alive.
class DeviceBlock {
 public:
  DeviceBlock(void* p, int device) : p_(p), device_(device) {}
  ~DeviceBlock() {
    cudaSetDevice(device_);
    cudaFree(p_);
  }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(p_); }

 private:
  void* p_;
  int device_;
};

Result<std::shared_ptr<DeviceBlock>> AllocateOn(int device, size_t bytes) {
  HYPIC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  void* p = nullptr;
  HYPIC_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
  return std::make_shared<DeviceBlock>(p, device);
}

constexpr size_t kAlign = 256;
size_t AlignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Offsets of each tensor in the packed block, and its size.
size_t Layout(const SegmentEntry& entry, std::vector<size_t>& offsets) {
  size_t total = 0;
  for (const EntryTensor& t : entry.tensors()) {
    offsets.push_back(total);
    total = AlignUp(total + t.view.NumBytes());
  }
  return total;
}

class NcclTransport final : public runtime::Transport {
 public:
  NcclTransport(std::vector<ncclComm_t> comms, std::vector<cudaStream_t> streams, int combine)
      : comms_(std::move(comms)), streams_(std::move(streams)), combine_(combine) {}
  ~NcclTransport() override {
    for (size_t d = 0; d < comms_.size(); ++d) {
      cudaSetDevice(static_cast<int>(d));
      cudaStreamDestroy(streams_[d]);
      ncclCommDestroy(comms_[d]);
    }
  }

  Result<runtime::EntryPtr> Deliver(const runtime::EntryPtr& entry, int from) override {
    if (entry == nullptr) return Internal("transport: null entry");
    if (from < 0 || static_cast<size_t>(from) >= comms_.size()) {
      return BadRequest("transport: no device " + std::to_string(from));
    }
    for (const EntryTensor& t : entry->tensors()) {
      if (!t.view.IsContiguous()) return BadRequest("transport: non-contiguous entry tensor");
    }
    std::vector<size_t> offsets;
    const size_t total = Layout(*entry, offsets);
    MutexLock lock(&mu_);
    // Pack on the worker's device (from wherever the tensors are: host or any device).
    HYPIC_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBlock> src, AllocateOn(from, total));
    for (size_t i = 0; i < entry->tensors().size(); ++i) {
      const TensorView& v = entry->tensors()[i].view;
      HYPIC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(src->data() + offsets[i], v.data(), v.NumBytes(),
                                                 cudaMemcpyDefault, streams_[from]));
    }
    HYPIC_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBlock> dst, AllocateOn(combine_, total));
    if (total > 0) {
      if (from == combine_) {
        HYPIC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst->data(), src->data(), total,
                                                   cudaMemcpyDeviceToDevice, streams_[from]));
      } else {
        HYPIC_NCCL_RETURN_IF_ERROR(ncclGroupStart());
        ncclResult_t send =
            ncclSend(src->data(), total, ncclUint8, combine_, comms_[from], streams_[from]);
        ncclResult_t recv =
            ncclRecv(dst->data(), total, ncclUint8, from, comms_[combine_], streams_[combine_]);
        HYPIC_NCCL_RETURN_IF_ERROR(ncclGroupEnd());
        HYPIC_NCCL_RETURN_IF_ERROR(send);
        HYPIC_NCCL_RETURN_IF_ERROR(recv);
      }
    }
    HYPIC_CUDA_RETURN_IF_ERROR(cudaSetDevice(from));
    HYPIC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(streams_[from]));
    HYPIC_CUDA_RETURN_IF_ERROR(cudaSetDevice(combine_));
    HYPIC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(streams_[combine_]));

    auto out = std::make_shared<SegmentEntry>(entry->meta());
    for (size_t i = 0; i < entry->tensors().size(); ++i) {
      const EntryTensor& t = entry->tensors()[i];
      TensorView view(dst->data() + offsets[i], t.view.dtype(), t.view.shape(), MemoryKind::kDevice,
                      combine_);
      HYPIC_RETURN_IF_ERROR(out->AddView(t.layer, t.kind, view, dst));
    }
    return runtime::EntryPtr(std::move(out));
  }

 private:
  Mutex mu_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
  const int combine_;
};

}  // namespace

Result<std::unique_ptr<runtime::Transport>> MakeNcclTransport(int combine_device) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (count < 2) {
    return Unsupported("NCCL transport needs 2 CUDA devices, found " + std::to_string(count));
  }
  if (combine_device < 0 || combine_device >= count) {
    return BadRequest("combine device " + std::to_string(combine_device) + " of " +
                      std::to_string(count));
  }
  std::vector<ncclComm_t> comms(static_cast<size_t>(count));
  std::vector<int> devices(static_cast<size_t>(count));
  for (int d = 0; d < count; ++d) devices[static_cast<size_t>(d)] = d;
  HYPIC_NCCL_RETURN_IF_ERROR(ncclCommInitAll(comms.data(), count, devices.data()));
  std::vector<cudaStream_t> streams(static_cast<size_t>(count));
  auto create_stream = [&](int d) -> Status {
    HYPIC_CUDA_RETURN_IF_ERROR(cudaSetDevice(d));
    HYPIC_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&streams[static_cast<size_t>(d)], cudaStreamNonBlocking));
    return Status::Ok();
  };
  for (int d = 0; d < count; ++d) {
    Status st = create_stream(d);
    if (!st.ok()) {
      for (int e = 0; e < d; ++e) cudaStreamDestroy(streams[static_cast<size_t>(e)]);
      for (ncclComm_t c : comms) ncclCommDestroy(c);
      return st;
    }
  }
  return std::unique_ptr<runtime::Transport>(
      new NcclTransport(std::move(comms), std::move(streams), combine_device));
}

Result<runtime::EntryPtr> DownloadEntry(const SegmentEntry& entry) {
  auto out = std::make_shared<SegmentEntry>(entry.meta());
  for (const EntryTensor& t : entry.tensors()) {
    if (!t.view.IsContiguous()) return BadRequest("download: non-contiguous entry tensor");
    HYPIC_ASSIGN_OR_RETURN(TensorView dst,
                           out->AddTensor(t.layer, t.kind, t.view.dtype(), t.view.shape()));
    HYPIC_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(dst.data(), t.view.data(), t.view.NumBytes(), cudaMemcpyDefault));
  }
  return runtime::EntryPtr(std::move(out));
}

}  // namespace hypic::gpu

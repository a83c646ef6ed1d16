#include <cuda_runtime.h>

#include <memory>
#include <mutex>

#include "gpu/cuda/cuda_backend.h"
#include "gpu/cuda/cuda_check.cuh"

namespace hypic::gpu {

namespace {

__global__ void AxpyKernel(float alpha, const float* __restrict__ x, float* __restrict__ y,
                           size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[i] = alpha * x[i] + y[i];
  }
}

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(void* p, size_t size, MemoryKind memory, int device)
      : p_(p), size_(size), memory_(memory), device_(device) {}
  ~CudaBuffer() override {
    if (p_ == nullptr) return;
    if (memory_ == MemoryKind::kDevice) {
      ScopedDevice on(device_);
      cudaFree(p_);
    } else {
      cudaFreeHost(p_);
    }
  }
  void* data() override { return p_; }
  const void* data() const override { return p_; }
  size_t size() const override { return size_; }
  MemoryKind memory() const override { return memory_; }
  int device() const override { return device_; }

 private:
  void* p_;
  size_t size_;
  MemoryKind memory_;
  int device_;
};

class CudaStreamImpl final : public Stream {
 public:
  CudaStreamImpl(cudaStream_t s, int device) : s_(s), device_(device) {}
  ~CudaStreamImpl() override {
    ScopedDevice on(device_);
    cudaStreamDestroy(s_);
  }
  int device() const override { return device_; }
  Status Synchronize() override {
    HYPIC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s_));
    return Status::Ok();
  }
  cudaStream_t get() const { return s_; }
  void* native_handle() const override { return s_; }

 private:
  cudaStream_t s_;
  int device_;
};

Status CheckRange(size_t offset, size_t bytes, size_t size) {
  if (offset > size || bytes > size - offset) {
    return BadRequest("copy range exceeds buffer of " + std::to_string(size) + " bytes");
  }
  return Status::Ok();
}

class CudaBackendImpl final : public Backend {
 public:
  explicit CudaBackendImpl(int count) : count_(count) {}

  BackendKind kind() const override { return BackendKind::kCuda; }
  int DeviceCount() const override { return count_; }

  Result<DeviceInfo> QueryDevice(int device) const override {
    HYPIC_RETURN_IF_ERROR(CheckOrdinal(device));
    cudaDeviceProp prop;
    HYPIC_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
    ScopedDevice on(device);
    HYPIC_RETURN_IF_ERROR(on.status());
    size_t free_b = 0, total_b = 0;
    HYPIC_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
    DeviceInfo info;
    info.kind = BackendKind::kCuda;
    info.index = device;
    info.name = prop.name;
    info.total_memory = total_b;
    info.free_memory = free_b;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    info.multiprocessors = prop.multiProcessorCount;
    return info;
  }

  Result<std::unique_ptr<Buffer>> Allocate(int device, size_t bytes) override {
    HYPIC_RETURN_IF_ERROR(CheckOrdinal(device));
    ScopedDevice on(device);
    HYPIC_RETURN_IF_ERROR(on.status());
    void* p = nullptr;
    if (bytes) {
      cudaError_t err = cudaMalloc(&p, bytes);
      if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return NoSpace("cudaMalloc of " + std::to_string(bytes) + " bytes on device " +
                       std::to_string(device));
      }
      HYPIC_CUDA_RETURN_IF_ERROR(err);
    }
    return std::unique_ptr<Buffer>(
        std::make_unique<CudaBuffer>(p, bytes, MemoryKind::kDevice, device));
  }

  Result<std::unique_ptr<Buffer>> AllocateHost(size_t bytes) override {
    void* p = nullptr;
    if (bytes) HYPIC_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
    return std::unique_ptr<Buffer>(
        std::make_unique<CudaBuffer>(p, bytes, MemoryKind::kHostPinned, 0));
  }

  Result<std::unique_ptr<Stream>> CreateStream(int device) override {
    HYPIC_RETURN_IF_ERROR(CheckOrdinal(device));
    ScopedDevice on(device);
    HYPIC_RETURN_IF_ERROR(on.status());
    cudaStream_t s;
    HYPIC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return std::unique_ptr<Stream>(std::make_unique<CudaStreamImpl>(s, device));
  }

  Status CopyToBuffer(Buffer& dst, size_t dst_offset, const void* src, size_t bytes,
                      Stream& stream) override {
    HYPIC_RETURN_IF_ERROR(CheckRange(dst_offset, bytes, dst.size()));
    auto& s = static_cast<CudaStreamImpl&>(stream);
    ScopedDevice on(s.device());
    HYPIC_RETURN_IF_ERROR(on.status());
    HYPIC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<char*>(dst.data()) + dst_offset, src,
                                               bytes, cudaMemcpyDefault, s.get()));
    return Status::Ok();
  }

  Status CopyFromBuffer(void* dst, const Buffer& src, size_t src_offset, size_t bytes,
                        Stream& stream) override {
    HYPIC_RETURN_IF_ERROR(CheckRange(src_offset, bytes, src.size()));
    auto& s = static_cast<CudaStreamImpl&>(stream);
    const auto& b = static_cast<const CudaBuffer&>(src);
    ScopedDevice on(s.device());
    HYPIC_RETURN_IF_ERROR(on.status());
    HYPIC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, static_cast<const char*>(b.data()) + src_offset,
                                               bytes, cudaMemcpyDefault, s.get()));
    return Status::Ok();
  }

  // A non-sticky error (a failed allocation, a bad launch configuration) is reported once and
  // cleared by cudaGetLastError; a sticky one (an illegal address, a device-side assert, an
  // uncorrectable ECC error, a lost device) poisons the context and every later call returns
  // it, so a synchronisation after clearing tells the two apart.
  Status CheckDevice(int device) override {
    HYPIC_RETURN_IF_ERROR(CheckOrdinal(device));
    ScopedDevice on(device);
    HYPIC_RETURN_IF_ERROR(on.status());
    (void)cudaGetLastError();
    HYPIC_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    return Status::Ok();
  }

  Status Axpy(float alpha, const Buffer& x, Buffer& y, size_t n, Stream& stream) override {
    HYPIC_RETURN_IF_ERROR(CheckRange(0, n * sizeof(float), x.size()));
    HYPIC_RETURN_IF_ERROR(CheckRange(0, n * sizeof(float), y.size()));
    if (n == 0) return Status::Ok();
    auto& s = static_cast<CudaStreamImpl&>(stream);
    ScopedDevice on(s.device());
    HYPIC_RETURN_IF_ERROR(on.status());
    const auto& xb = static_cast<const CudaBuffer&>(x);
    int threads = 256;
    int blocks = static_cast<int>((n + threads - 1) / threads);
    if (blocks > 4096) blocks = 4096;
    AxpyKernel<<<blocks, threads, 0, s.get()>>>(alpha, static_cast<const float*>(xb.data()),
                                                static_cast<float*>(y.data()), n);
    HYPIC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return Status::Ok();
  }

 private:
  Status CheckOrdinal(int device) const {
    if (device < 0 || device >= count_) {
      return NotFound("no CUDA device " + std::to_string(device) + " (have " +
                      std::to_string(count_) + ")");
    }
    return Status::Ok();
  }

  int count_;
};

struct Probe {
  std::unique_ptr<CudaBackendImpl> backend;
  std::string reason;
};

const Probe& GetProbe() {
  static const Probe probe = [] {
    Probe p;
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();
      p.reason = std::string("no CUDA device (") + cudaGetErrorString(err) + ")";
    } else if (count == 0) {
      p.reason = "no CUDA device";
    } else {
      p.backend = std::make_unique<CudaBackendImpl>(count);
    }
    return p;
  }();
  return probe;
}

}  // namespace

Backend* CudaBackendIfAvailable() { return GetProbe().backend.get(); }
std::string CudaUnavailableReason() { return GetProbe().reason; }

}  // namespace hypic::gpu

// DeviceArray<T>: device scratch of the linear-attention kernels, owned by one object. It is
// stream-ordered: allocated on a stream (cudaMallocAsync) and freed on the same stream when the
// object goes out of scope (cudaFreeAsync), so work already enqueued there may still use it and
// the owner need not synchronise first. Empty until Allocate. Not thread-safe: one owner.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/status.h"
#include "gpu/cuda/cuda_check.cuh"

namespace hypic::linear {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (p_ != nullptr) cudaFreeAsync(p_, stream_);
  }

  // n elements on `stream`'s device, usable by work enqueued on `stream` after this call.
  // REQUIRES: not yet allocated. Allocates nothing for n == 0 (get() stays nullptr).
  // Errors: kDeviceError.
  [[nodiscard]] Status Allocate(size_t n, cudaStream_t stream) {
    if (n == 0) return Status::Ok();
    HYPIC_CUDA_RETURN_IF_ERROR(
        cudaMallocAsync(reinterpret_cast<void**>(&p_), n * sizeof(T), stream));
    stream_ = stream;
    return Status::Ok();
  }
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace hypic::linear

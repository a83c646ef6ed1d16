// CUDA error checking at the backend boundary: a failing runtime call becomes
// Status kDeviceError naming the statement, file and line. Never throws. ScopedDevice: the
// RAII switch of the calling thread's current device that every CUDA source here uses instead
// of a bare cudaSetDevice, so no call leaves its caller on another device.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/status.h"

namespace hypic::gpu {

inline Status CudaStatus(cudaError_t err, const char* stmt, const char* file, int line) {
  if (err == cudaSuccess) return Status::Ok();
  return DeviceError(std::string(stmt) + " failed at " + file + ":" + std::to_string(line) + ": " +
                     cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

// Makes `device` the calling thread's current device for the enclosing scope and restores the
// previous one when destroyed (CUDA's current device is per thread, and every runtime call,
// allocation and launch uses it). Check status() before any device work. A destructor that
// frees device memory or a stream takes one too. Not copyable or movable.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) : status_(Switch(device, &restore_)) {}
  ~ScopedDevice() {
    if (restore_ >= 0) (void)cudaSetDevice(restore_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  const Status& status() const { return status_; }

 private:
  static Status Switch(int device, int* restore) {
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current == device) return Status::Ok();
    Status st = CudaStatus(cudaSetDevice(device), "cudaSetDevice(device)", __FILE__, __LINE__);
    if (st.ok()) *restore = current;
    return st;
  }

  int restore_ = -1;  // the device to restore; -1: nothing was switched (declared first)
  Status status_;
};

}  // namespace hypic::gpu

#define HYPIC_CUDA_RETURN_IF_ERROR(stmt) \
  HYPIC_RETURN_IF_ERROR(::hypic::gpu::CudaStatus((stmt), #stmt, __FILE__, __LINE__))

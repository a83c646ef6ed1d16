// CUDA error checking at the backend boundary: a failing runtime call becomes
// Status kDeviceError naming the statement, file and line. Never throws.
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

}  // namespace hypic::gpu

#define HYPIC_CUDA_RETURN_IF_ERROR(stmt) \
  HYPIC_RETURN_IF_ERROR(::hypic::gpu::CudaStatus((stmt), #stmt, __FILE__, __LINE__))

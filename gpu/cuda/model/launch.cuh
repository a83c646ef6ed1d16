// The launch helpers the CUDA model kernels share (model_kernels.cu, moe_kernels.cu): the
// grid-stride loop, the grid size for a thread count, and the Status of a CUDA runtime or
// cuBLAS call. Header-only, stateless.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/status.h"
#include "gpu/cuda/cuda_check.cuh"

namespace hypic::model {

inline constexpr int kThreads = 256;

// Blocks of kThreads for n threads of a grid-stride loop (at least one, at most 65,535).
inline int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

inline Status CublasStatus(cublasStatus_t cs, const char* what) {
  if (cs == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return DeviceError(std::string(what) + " failed with cuBLAS status " + std::to_string(cs));
}

}  // namespace hypic::model

// The Status of one CUDA runtime call, naming the statement (for the sticky error).
#define HYPIC_CUDA_STATUS(stmt) ::hypic::gpu::CudaStatus((stmt), #stmt, __FILE__, __LINE__)

#define HYPIC_GRID_STRIDE(i, n)                                                          \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// The CUDA backend's only public entry point: a factory, as in ggml-cuda.h. No CUDA header is
// included here, so code outside gpu/cuda/ never sees a CUDA type.
#pragma once

#include "gpu/backend.h"

namespace hypic::gpu {

// The process-wide CUDA backend, or nullptr when no CUDA device is visible (or the driver is
// missing). Thread-safe.
Backend* CudaBackendIfAvailable();

// Why CudaBackendIfAvailable() returned nullptr, e.g. "no CUDA device" (for `hypic-op devices`).
std::string CudaUnavailableReason();

}  // namespace hypic::gpu

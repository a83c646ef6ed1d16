// The CUDA backend of Model::Pass (gpu/cuda/model/): a factory over plain types, so code
// outside gpu/cuda/ never sees a CUDA type (the linear_cuda.h pattern). In builds without CUDA
// (cuda_forward_stub.cpp) CudaModelKernelsBuilt() is false and the factories report
// kUnsupported.
//
// A context holds, for one model on one device: the weights uploaded once, one stream with a
// cuBLAS handle bound to it (fp32 sgemm, TF32 off), and the grown scratch. The kernels object
// of a pass locks its context for its whole life, so passes on one device run one at a time.
#pragma once

#include <memory>

#include "core/status.h"
#include "gpu/model/forward_kernels.h"
#include "gpu/model/weights.h"

namespace hypic::model {

// True when this build compiled the model kernels (a device may still be absent).
bool CudaModelKernelsBuilt();

// Uploads `weights` to CUDA device `device` (which must exist); `weights` must outlive it.
Result<std::shared_ptr<DeviceContext>> CreateCudaContext(const ModelWeights& weights, int device);

// The kernels of one pass over a context made by CreateCudaContext.
Result<std::unique_ptr<ForwardKernels>> CreateCudaForwardKernels(
    std::shared_ptr<DeviceContext> context);

}  // namespace hypic::model

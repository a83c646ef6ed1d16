// The CUDA entry points in builds without CUDA: they report kUnsupported.
#include "gpu/linear/linear_cuda.h"

namespace hypic::linear {

bool CudaKernelsBuilt() { return false; }

Status CudaForward(Variant, const Shape&, const Inputs&, const float*, const Outputs&,
                   gpu::Stream&) {
  return Unsupported("this build has no CUDA kernels for the linear-attention operators");
}

Status CudaApplySegments(TransitionForm, const Shape&, int, const float* const*,
                         const float* const*, float*, gpu::Stream&) {
  return Unsupported("this build has no CUDA kernels for the linear-attention operators");
}

}  // namespace hypic::linear

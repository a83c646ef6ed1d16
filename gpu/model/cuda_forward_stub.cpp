// The CUDA model backend in builds without CUDA: it reports kUnsupported.
#include "gpu/model/cuda_forward.h"

namespace hypic::model {

bool CudaModelKernelsBuilt() { return false; }

Result<std::shared_ptr<DeviceContext>> CreateCudaContext(const ModelWeights&, int,
                                                         const CudaContextOptions&) {
  return Unsupported("this build has no CUDA kernels for the model (configure with HYPIC_CUDA=ON)");
}

Result<std::unique_ptr<ForwardKernels>> CreateCudaForwardKernels(std::shared_ptr<DeviceContext>) {
  return Unsupported("this build has no CUDA kernels for the model (configure with HYPIC_CUDA=ON)");
}

}  // namespace hypic::model

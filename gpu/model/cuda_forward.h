// The CUDA backend of Model::Pass (gpu/cuda/model/): a factory over plain types, so code
// outside gpu/cuda/ never sees a CUDA type (the linear_cuda.h pattern). In builds without CUDA
// (cuda_forward_stub.cpp) CudaModelKernelsBuilt() is false and the factories report
// kUnsupported.
//
// A context holds, for one model on one device: the weights uploaded once (the GEMM weights in
// their resident precision: bf16 as 2 bytes a parameter for a bf16-resident model, never an
// fp32 copy; everything else fp32), one stream with a cuBLAS and a cuBLASLt handle bound to it,
// the grown device scratch and the pinned host staging of the pass's copies. The kernels object
// of a pass locks its context for its whole life, so passes on one device run one at a time.
//
// Precision of the GEMMs: bf16 weights run as bf16 x bf16 products accumulated in fp32 on the
// tensor cores (cuBLASLt; the activations rounded to bf16 first, as on the CPU's bf16 path);
// fp32 weights as fp32 GEMMs, exact fp32 products unless CudaContextOptions::allow_tf32. The
// norms, RoPE, the conv, attention's softmax and the linear-attention state algebra are fp32
// always (the state jump's GEMM too, whatever allow_tf32 says).
#pragma once

#include <memory>

#include "core/status.h"
#include "gpu/model/forward_kernels.h"
#include "gpu/model/weights.h"

namespace hypic::model {

// True when this build compiled the model kernels (a device may still be absent).
bool CudaModelKernelsBuilt();

struct CudaContextOptions {
  // fp32 weights only: projections, experts and lm_head as TF32 tensor-core products (inputs
  // rounded to 10 mantissa bits, about 5e-4 relative each; fp32 accumulation), several times
  // the fp32 GEMM rate. Off: fp32 products, within 1e-4 of the CPU.
  bool allow_tf32 = false;
};

// Uploads `weights` to CUDA device `device` (which must exist); `weights` must outlive it.
Result<std::shared_ptr<DeviceContext>> CreateCudaContext(const ModelWeights& weights, int device,
                                                         const CudaContextOptions& options = {});

// The kernels of one pass over a context made by CreateCudaContext.
Result<std::unique_ptr<ForwardKernels>> CreateCudaForwardKernels(
    std::shared_ptr<DeviceContext> context);

}  // namespace hypic::model

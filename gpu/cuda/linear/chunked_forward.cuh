// The device chunked (WY / UT) forward of the scalar-decay and no-decay variants (linear, retnet,
// mamba2, deltanet, gdn), internal to gpu/cuda/linear: linear_kernels.cu's CudaForward routes
// here when CudaChunkSize is positive and keeps the per-token kernel otherwise. The kernels and
// their thread mapping are described in chunked_forward.cu. Thread-safe: no shared state.
#pragma once

#include <cuda_runtime.h>

#include "core/status.h"
#include "gpu/linear/linear_attention.h"

namespace hypic::linear {

// The chunk size the chunked kernels use for (variant, shape) on `device`, or 0 where they do
// not apply: diagonal decays (gla, kda), a delta-family dk below 16, or tiles that exceed the
// device's shared memory per block. 64 tokens, except that the delta family uses the largest of
// 16 / 32 / 64 not above dk, so that the fp32 T_C chain never solves a chunk holding more keys
// than dimensions (the CPU splits such chunks for T alone). Errors: kDeviceError.
Result<int> CudaChunkSize(Variant variant, const Shape& shape, int device);

// ChunkedForward's contract on device memory, enqueued on `stream`. REQUIRES: Validate passed,
// chunk == CudaChunkSize(variant, shape, current device) > 0, and for kScalarLog variants with
// out.zero_state wanted, `log_transition` holds the per-head sum of g ([HV], device memory);
// otherwise it may be nullptr. Synchronises the stream only when S(C|0) was taken by difference
// (to learn which heads must rerun from zero). Errors: kDeviceError.
Status CudaChunkedForward(Variant variant, const Shape& shape, const Inputs& in,
                          const float* initial_state, const Outputs& out,
                          const float* log_transition, int chunk, cudaStream_t stream);

}  // namespace hypic::linear

// The CUDA entry points of the linear-attention operators. No CUDA type appears here: device
// memory is passed as plain float pointers (from gpu::Buffer::data() of the CUDA backend) and
// the stream as a gpu::Stream&. In builds without CUDA every call returns kUnsupported.
//
// The kernels run the per-token recurrence with one thread per state column (linear_math.h's
// ColumnStep, the code the CPU reference runs): column j of S evolves independently, and so
// does every column of the dense T_C (the homogeneous recurrence), so one launch produces o,
// the final state, S(C|0) and T_C together. Composition uses cuBLAS batched over heads.
//
// Ordering: each call enqueues its work on `stream` (Stream::native_handle) after the work
// already queued there, on the device of `stream`, and is complete when it returns (it
// synchronises the stream). Thread-safe: no shared state.
#pragma once

#include "core/status.h"
#include "gpu/backend.h"
#include "gpu/linear/linear_attention.h"

namespace hypic::linear {

// True when this build compiled the kernels (a device may still be absent).
bool CudaKernelsBuilt();

// ChunkedForward's contract on device memory: every pointer of `in`, `initial_state` and `out`
// is a device pointer (nullptr where ChunkedForward allows it), with the same layouts.
// Errors: kBadRequest (Validate), kDeviceError, kUnsupported without CUDA.
Status CudaForward(Variant variant, const Shape& shape, const Inputs& in,
                   const float* initial_state, const Outputs& out, gpu::Stream& stream);

// ApplySegments on device memory: for i = 0..count-1, state <- T_i state + S_zero_i.
// `transitions` and `zero_states` are host arrays of `count` device pointers.
Status CudaApplySegments(TransitionForm form, const Shape& shape, int count,
                         const float* const* transitions, const float* const* zero_states,
                         float* state, gpu::Stream& stream);

}  // namespace hypic::linear

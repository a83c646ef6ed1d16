// The CUDA entry points of the linear-attention operators. No CUDA type appears here: device
// memory is passed as plain float pointers (from gpu::Buffer::data() of the CUDA backend) and
// the stream as a gpu::Stream&. In builds without CUDA every call returns kUnsupported.
//
// CudaForward runs the chunked WY/UT forward (chunked_forward.cpp's algorithm, fp32, with the
// per-chunk arithmetic of chunk_math.h) for the scalar-decay and no-decay variants: one kernel
// builds each (head, chunk)'s state-independent part (A_qk, A_kk, the triangular solve for
// [U | W]), a second advances the state and the dense T_C over the chunks of each head, tiled
// over state columns. The diagonal-decay variants (gla, kda), a delta-family dk below 16 and
// shapes whose tiles do not fit the device's shared memory keep the per-token recurrence, one
// thread per state column (linear_math.h's ColumnStep, the code the CPU reference runs).
// Composition uses cuBLAS batched over heads. Layouts and which outputs may be nullptr follow
// ChunkedForward.
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
// is a device pointer (nullptr where ChunkedForward allows it), with the same layouts;
// final_state may alias initial_state. Matches ChunkedForward within 1e-4 relative.
// Errors: kBadRequest (Validate), kDeviceError, kUnsupported without CUDA.
Status CudaForward(Variant variant, const Shape& shape, const Inputs& in,
                   const float* initial_state, const Outputs& out, gpu::Stream& stream);

// ApplySegments on device memory: for i = 0..count-1, state <- T_i state + S_zero_i.
// `transitions` and `zero_states` are host arrays of `count` device pointers.
Status CudaApplySegments(TransitionForm form, const Shape& shape, int count,
                         const float* const* transitions, const float* const* zero_states,
                         float* state, gpu::Stream& stream);

}  // namespace hypic::linear

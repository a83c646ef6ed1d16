// RoPE re-rotation of cached linear-attention states (MATH.md §4): a segment computed at
// offset 0 and placed at offset delta has S@delta = R(delta) S@0 and, for dense transitions,
// T@delta = R(delta) T R(delta)^T. R rotates the dk rows in NeoX pairs (i, i + rot/2) over the
// first `rotary_dim` dims, with inv_freq_i = theta^(-2i/rotary_dim). Thread-compatible.
#pragma once

#include <cstdint>

#include "gpu/linear/linear_attention.h"

namespace hypic::linear {

struct RopeParams {
  int32_t rotary_dim = 0;  // even, <= dk
  double theta = 10000.0;
};

// Rotates the rows of state [HV, dk, dv] in place by the angle of position `delta`.
void RerotateState(const Shape& shape, const RopeParams& rope, int64_t delta, float* state);

// T <- R T R^T for dense transitions [HV, dk, dk]; no-op for scalar/identity forms.
// REQUIRES: form != kDiagLog (a diagonal decay does not commute with a rotation; such a
// variant has no RoPE inside the linear layer).
void RerotateTransition(TransitionForm form, const Shape& shape, const RopeParams& rope,
                        int64_t delta, float* transition);

}  // namespace hypic::linear

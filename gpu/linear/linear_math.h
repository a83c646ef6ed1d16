// Per-element math of the linear-attention recurrences (MATH.md §2), as HYPIC_HD inline
// functions: the CPU reference (RecurrentForward), the CPU chunked code's boundary cases and
// the CUDA kernels (gpu/cuda/linear/) all call these, so the CPU tests exercise the same
// arithmetic the device runs.
//
// Every variant's update is separable by state column: column j of S (one value channel) evolves
// independently, s <- A_t s + k_t u_j, with u_j = v_j (plain family) or
// u_j = beta (v_j - k^T A_t s) (delta family), and o_t[j] = q_t^T s. A column of the dense
// transition T_C evolves the same way with v = 0, because T_C = A_n ... A_1 is the state map of
// the homogeneous recurrence. The kernels therefore map one thread to one column.
// Stateless and thread-compatible.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/hd.h"
#include "gpu/linear/linear_attention.h"

namespace hypic::linear {

// How a token's A_t decays the state before the (optional) delta correction.
enum class DecayKind : uint8_t { kNone = 0, kScalar = 1, kDiag = 2 };

// One token's update of one state column `s` (dk rows, `stride` floats apart), decay first:
//   s <- decay(s); u = delta ? beta * (v - k^T s) : v; s += k u; returns q^T s (0 without q).
// `decay` is exp(g) per row for kDiag; `scalar_decay` is exp(g) for kScalar. Acc is the
// accumulation type (double in the CPU reference, float on the device).
template <typename Acc>
HYPIC_HD_INLINE float ColumnStep(DecayKind kind, bool delta, int dk, float* s, int64_t stride,
                                 const float* k, const float* q, float v, float beta,
                                 const float* decay, float scalar_decay) {
  if (kind == DecayKind::kScalar) {
    for (int d = 0; d < dk; ++d) s[d * stride] *= scalar_decay;
  } else if (kind == DecayKind::kDiag) {
    for (int d = 0; d < dk; ++d) s[d * stride] *= decay[d];
  }
  Acc u = static_cast<Acc>(v);
  if (delta) {
    Acc pred = 0;
    for (int d = 0; d < dk; ++d) pred += static_cast<Acc>(s[d * stride]) * k[d];
    u = static_cast<Acc>(beta) * (u - pred);
  }
  Acc out = 0;
  for (int d = 0; d < dk; ++d) {
    float& x = s[d * stride];
    x = static_cast<float>(x + static_cast<Acc>(k[d]) * u);
    if (q != nullptr) out += static_cast<Acc>(x) * q[d];
  }
  return static_cast<float>(out);
}

// The factor a non-dense transition applies to row `row` of head `head`'s state: e^{sum g} of
// the head (kScalarLog), of the row (kDiagLog), or 1 (kIdentity). REQUIRES: form != kDense.
HYPIC_HD_INLINE float LogTransitionFactor(TransitionForm form, const float* transition, int head,
                                          int row, int dk) {
  if (form == TransitionForm::kScalarLog) return expf(transition[head]);
  if (form == TransitionForm::kDiagLog)
    return expf(transition[static_cast<int64_t>(head) * dk + row]);
  return 1.0f;
}

// NeoX rotation of one pair (a, b) = (x[i], x[i + rot/2]) by angle with (cos, sin).
HYPIC_HD_INLINE void RotatePair(float& a, float& b, float cos_v, float sin_v) {
  const float na = a * cos_v - b * sin_v;
  const float nb = b * cos_v + a * sin_v;
  a = na;
  b = nb;
}

// SiLU, the short conv's activation: x * sigmoid(x).
HYPIC_HD_INLINE float Silu(float x) { return x / (1.0f + expf(-x)); }

}  // namespace hypic::linear

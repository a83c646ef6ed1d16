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

#include "core/dtype.h"  // F32Bits, F32FromBits
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

// exp(x), relative error below 3e-7 over the float range (inputs below -87.3 give ~1e-38, not
// 0; NaN stays NaN). Branch-free so loops over it vectorise: Cody-Waite reduction to
// |r| <= ln2/2, a degree-6 Taylor polynomial, and the power of two built in the exponent bits.
HYPIC_HD_INLINE float FastExp(float x) {
  x = x < -87.3f ? -87.3f : x;  // std::max / std::min order: NaN passes through
  x = 88.3f < x ? 88.3f : x;
  constexpr float kLog2e = 1.44269504f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * kLog2e + kRound;
  const float n = t - kRound;
  float r = x - n * 0.693145751953125f;  // ln 2, high part (exact product)
  r -= n * 1.428606765330187e-06f;       // ln 2, low part
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n, n in [-126, 127], built in the exponent field. The shift is unsigned so that a NaN
  // (whose bits leave that range) gives garbage scale bits, not signed overflow; p is NaN then.
  const uint32_t exponent = F32Bits(t) - 0x4B400000u + 127u;
  return p * F32FromBits(exponent << 23);
}

// SiLU, x * sigmoid(x): the short conv's activation and the gates' of the forward pass.
HYPIC_HD_INLINE float Silu(float x) { return x / (1.0f + FastExp(-x)); }

}  // namespace hypic::linear

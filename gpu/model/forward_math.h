// Per-element and per-row math of the forward pass (MATH.md §5-§6) as HYPIC_HD inline
// functions: the CPU kernels (cpu_kernels.cpp) and the CUDA kernels (gpu/cuda/model/) both call
// these, so the CPU tests exercise the arithmetic the device runs. Accumulation types and
// operation order are part of the contract: the CPU path is bit-for-bit what it was before
// the kernels moved behind ForwardKernels.
//
// Rows are plain pointers with unit stride; callers map threads or loops to rows. Stateless and
// thread-compatible.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/hd.h"
#include "gpu/linear/linear_math.h"  // FastExp, Silu

namespace hypic::model {

using linear::FastExp;
using linear::Silu;

HYPIC_HD_INLINE float Sigmoid(float x) { return 1.0f / (1.0f + FastExp(-x)); }
// softplus with the usual linear tail above 20 (float: log1p(e^x) == x there).
HYPIC_HD_INLINE float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// The dot product of two rows in double, as 8 interleaved partial sums (lane l takes the
// elements i = l mod 8) added pairwise at the end: a fixed order, the same on every path, and
// 8 independent chains where one running sum would wait out each add's latency (the norms and
// gates of a long prompt's rows were 3-5% of its prefill).
HYPIC_HD_INLINE double DotInDouble(const float* a, const float* b, int64_t dim) {
  double part[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    for (int l = 0; l < 8; ++l) part[l] += static_cast<double>(a[i + l]) * b[i + l];
  }
  for (int l = 0; i < dim; ++i, ++l) part[l] += static_cast<double>(a[i]) * b[i];
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
}
HYPIC_HD_INLINE double SumSquares(const float* x, int64_t dim) { return DotInDouble(x, x, dim); }

// 1 / rms(x) of a row of `dim` elements, sum of squares in double.
HYPIC_HD_INLINE float RmsInverse(const float* x, int64_t dim, float eps) {
  return static_cast<float>(1.0 / sqrt(SumSquares(x, dim) / static_cast<double>(dim) + eps));
}

// Zero-centred RMSNorm of Qwen3-Next over one row: y = x / rms(x) * (1 + w). x and y may alias.
HYPIC_HD_INLINE void RmsNormZeroCentredRow(const float* x, const float* w, float* y, int64_t dim,
                                           float eps) {
  const float inv = RmsInverse(x, dim, eps);
  for (int64_t i = 0; i < dim; ++i) y[i] = x[i] * inv * (1.0f + w[i]);
}

// The GDN output norm over one value head, in place: o = w * o / rms(o) * silu(z) (plain, not
// zero-centred, weight).
HYPIC_HD_INLINE void GatedRmsNormRow(float* o, const float* z, const float* w, int64_t dim,
                                     float eps) {
  const float inv = RmsInverse(o, dim, eps);
  for (int64_t d = 0; d < dim; ++d) o[d] = w[d] * (o[d] * inv) * Silu(z[d]);
}

// GDN's q/k normalisation over one head: dst = src / sqrt(|src|^2 + 1e-6) * scale (eps inside
// the root, as fla's l2norm; scale is 1/sqrt(dk) for q, 1 for k).
HYPIC_HD_INLINE void L2NormRow(const float* src, float* dst, int64_t dim, float scale) {
  const float inv = static_cast<float>(1.0 / sqrt(SumSquares(src, dim) + 1e-6)) * scale;
  for (int64_t d = 0; d < dim; ++d) dst[d] = src[d] * inv;
}

// GDN's per-token, per-value-head log decay: g = -e^{A_log} * softplus(a + dt_bias).
HYPIC_HD_INLINE float GdnLogDecay(float a_log, float a, float dt_bias) {
  return -expf(a_log) * Softplus(a + dt_bias);
}

// The inverse frequency of RoPE pair i: theta^(-2i / rotary_dim), in double.
HYPIC_HD_INLINE double RopeInvFreq(double theta, int64_t i, int64_t rotary_dim) {
  return pow(theta, -static_cast<double>(2 * i) / static_cast<double>(rotary_dim));
}

// The (cos, sin) of position `pos` for a pair of inverse frequency `inv_freq`, computed in
// double and rounded once.
HYPIC_HD_INLINE void RopeCosSin(int64_t pos, double inv_freq, float* cos_v, float* sin_v) {
  const double angle = static_cast<double>(pos) * inv_freq;
  *cos_v = static_cast<float>(cos(angle));
  *sin_v = static_cast<float>(sin(angle));
}

// SwiGLU of one (gate, up) pair, and over one row of [gate (im) | up (im)]: the gate half
// becomes silu(gate) * up, in place.
HYPIC_HD_INLINE float SwiGlu(float gate, float up) { return Silu(gate) * up; }
HYPIC_HD_INLINE void SwiGluRow(float* row, int64_t im) {
  for (int64_t i = 0; i < im; ++i) row[i] = SwiGlu(row[i], row[im + i]);
}

// The shared expert's gate of one row: sigmoid(x . w), the dot product in double.
HYPIC_HD_INLINE float SharedExpertGate(const float* x, const float* w, int64_t dim) {
  return Sigmoid(static_cast<float>(DotInDouble(x, w, dim)));
}

}  // namespace hypic::model

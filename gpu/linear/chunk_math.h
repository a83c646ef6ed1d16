// Per-chunk arithmetic of the chunked (WY / UT) forward (MATH.md §2, chunked_forward.cpp's
// opening comment) for the scalar-decay and no-decay variants, as HYPIC_HD inline functions over
// plain pointers and strides. The CUDA chunked kernels (gpu/cuda/linear/) call exactly these, one
// entry per thread, and tests/gpu/linear/linear_chunk_math_test.cpp assembles a whole chunked
// forward from them on the CPU, so the device arithmetic is tested without a device.
//
// Within a chunk of L tokens, b_r is the cumulative log-decay after token r (b_{-1} = 0), kept
// in double because its rounding enters every exponent. Only e^{b_r - b_s} with r >= s is formed,
// so no factor overflows however strong the decay. Every dot product accumulates in fp32 in index
// order. Stateless and thread-compatible.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/hd.h"

namespace hypic::linear {

// sum_{i<n} x[i * xs] * y[i * ys].
HYPIC_HD_INLINE float StridedDot(const float* x, int64_t xs, const float* y, int64_t ys, int n) {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += x[i * xs] * y[i * ys];
  return acc;
}

// b[r] = sum_{i<=r} g[i * stride] for r < len.
HYPIC_HD_INLINE void ChunkLogDecayPrefix(const float* g, int64_t stride, int len, double* b) {
  double acc = 0.0;
  for (int r = 0; r < len; ++r) {
    acc += g[r * stride];
    b[r] = acc;
  }
}

// e^{b_r - b_s}, the decay from after token s to after token r; s = -1 is the chunk start.
// b == nullptr means no decay (1). REQUIRES: r >= s.
HYPIC_HD_INLINE float ChunkDecay(const double* b, int r, int s) {
  if (b == nullptr) return 1.0f;
  const double from = s < 0 ? 0.0 : b[s];
  const double to = r < 0 ? 0.0 : b[r];
  return expf(static_cast<float>(to - from));
}

// A_qk[r, s] = e^{b_r - b_s} q_r . k_s for s <= r, 0 above the diagonal.
HYPIC_HD_INLINE float QkScore(const float* q_r, const float* k_s, int dk, const double* b, int r,
                              int s) {
  if (s > r) return 0.0f;
  return ChunkDecay(b, r, s) * StridedDot(q_r, 1, k_s, 1, dk);
}

// A_kk[r, s] = beta_r e^{b_r - b_s} k_r . k_s for s < r, 0 on and above the diagonal.
HYPIC_HD_INLINE float KkScore(const float* k_r, const float* k_s, int dk, const double* b,
                              float beta_r, int r, int s) {
  if (s >= r) return 0.0f;
  return beta_r * ChunkDecay(b, r, s) * StridedDot(k_r, 1, k_s, 1, dk);
}

// One column x (n entries, `stride` apart) of (I + A) X = B, in place by forward substitution:
// A is strictly lower triangular [n, n] with row stride lda (its diagonal and upper part are not
// read). Columns are independent, so the device gives each its own thread.
HYPIC_HD_INLINE void ForwardSubstituteColumn(const float* a, int64_t lda, int n, float* x,
                                             int64_t stride) {
  for (int r = 1; r < n; ++r) x[r * stride] -= StridedDot(a + r * lda, 1, x, stride, r);
}

// V_new[r, j] = U[r, j] - W_r . S[:, j]: the value row r leaves after the delta correction against
// the chunk's entry state. `s_col` is column j of S (dk rows, `s_stride` apart).
HYPIC_HD_INLINE float NewValue(float u, const float* w_r, const float* s_col, int64_t s_stride,
                               int dk) {
  return u - StridedDot(w_r, 1, s_col, s_stride, dk);
}

// O[r, j] = Q_hat_r . S[:, j] + sum_{s<=r} A_qk[r, s] V_new[s, j], with Q_hat_r = e^{b_r} q_r.
HYPIC_HD_INLINE float ChunkOutput(const float* q_hat_r, const float* s_col, int64_t s_stride,
                                  int dk, const float* a_qk_r, const float* v_new_col,
                                  int64_t v_stride, int r) {
  return StridedDot(q_hat_r, 1, s_col, s_stride, dk) +
         StridedDot(a_qk_r, 1, v_new_col, v_stride, r + 1);
}

// S[d, j] after the chunk: decay_end S[d, j] + sum_{r<len} K_hat[r, d] V_new[r, j], with
// decay_end = e^{b_{L-1}} and K_hat_r = e^{b_{L-1} - b_r} k_r; `k_hat_col` is column d of K_hat.
HYPIC_HD_INLINE float UpdatedState(float s, float decay_end, const float* k_hat_col,
                                   int64_t k_stride, const float* v_new_col, int64_t v_stride,
                                   int len) {
  return decay_end * s + StridedDot(k_hat_col, k_stride, v_new_col, v_stride, len);
}

// S(C|0)[d, j] = S_out[d, j] - (T_C S_init)[d, j]: `t_row` is row d of a dense T_C, or nullptr for
// the diagonal T_C = factor I. `init_col` is column j of S_init (dk rows, `init_stride` apart).
HYPIC_HD_INLINE float ZeroStateByDifference(float s_out, const float* t_row, float factor,
                                            const float* init_col, int64_t init_stride, int d,
                                            int dk) {
  if (t_row == nullptr) return s_out - factor * init_col[d * init_stride];
  return s_out - StridedDot(t_row, 1, init_col, init_stride, dk);
}

}  // namespace hypic::linear

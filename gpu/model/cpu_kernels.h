// The CPU building blocks of the forward pass: sgemm against nn.Linear weights, the two RMSNorm
// variants, RoPE, a vectorisable exp (and SiLU/sigmoid on top of it), causal GQA attention
// blocked over sgemm, and a small fork-join ParallelFor.
//
// All buffers are fp32, row-major, caller-owned. Threading: Gemm uses OpenBLAS's own threads;
// everything else splits rows over ParallelFor. Functions are thread-compatible (no state other
// than OpenBLAS's pool).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>

namespace hypic::model {

// Sets the threads every pass uses: OpenBLAS's pool and ParallelFor (default: the hardware's
// thread count). Process-wide; meant for startup and benchmarks, not for concurrent change.
void SetComputeThreads(int threads);
int ComputeThreads();

// Calls fn(begin, end) on disjoint ranges covering [0, n), on up to ComputeThreads() threads
// (the caller's thread takes one range). Runs inline when n < min_per_thread * 2.
void ParallelFor(int64_t n, int64_t min_per_thread,
                 const std::function<void(int64_t, int64_t)>& fn);

// y[m, n] = x[m, k] * w[n, k]^T (+ y when accumulate). Leading dimensions in elements.
void Gemm(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
          float* y, int64_t ldy, bool accumulate = false);

// exp(x), relative error below 3e-7 over the float range (inputs below -87.3 give ~1e-38, not
// 0; NaN stays NaN). Branch-free so loops over it vectorise: Cody-Waite reduction to
// |r| <= ln2/2, a degree-6 Taylor polynomial, and the power of two built in the exponent bits.
inline float FastExp(float x) {
  x = std::min(std::max(x, -87.3f), 88.3f);
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
  int32_t ti;
  std::memcpy(&ti, &t, sizeof ti);
  const int32_t bits = (ti - 0x4B400000 + 127) * (1 << 23);  // 2^n, n in [-126, 127]
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
inline float Sigmoid(float x) { return 1.0f / (1.0f + FastExp(-x)); }
inline float Silu(float x) { return x / (1.0f + FastExp(-x)); }

// Zero-centred RMSNorm of Qwen3-Next: y = x / rms(x) * (1 + w), per row of `dim` elements.
// x and y may alias. Row strides ldx, ldy.
void RmsNormZeroCentred(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                        int64_t rows, int64_t dim, float eps);

// Rotates the first `rotary_dim` dims of each head (NeoX pairs (i, i + rotary_dim/2)) of rows
// [0, rows): row r is at position pos0 + r; head h of row r starts at x + r*ld + h*head_dim.
void ApplyRope(float* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_dim,
               int64_t rotary_dim, double theta, int64_t pos0);

struct AttentionShape {
  int64_t heads = 0;     // query heads
  int64_t kv_heads = 0;  // key/value heads; query head h reads kv head h / (heads/kv_heads)
  int64_t head_dim = 0;
};

// Causal softmax attention for `rows` queries at positions pos0 .. pos0+rows-1 over keys and
// values at positions [0, pos0 + rows). q/out: [rows, heads, head_dim]; k/v: [positions,
// kv_heads, head_dim]. Scores scaled by 1/sqrt(head_dim); softmax in fp32.
void CausalAttention(const AttentionShape& shape, const float* q, const float* k, const float* v,
                     float* out, int64_t rows, int64_t pos0);

}  // namespace hypic::model

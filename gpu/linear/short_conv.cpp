#include "gpu/linear/short_conv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gpu/cpu/compute_threads.h"
#include "gpu/linear/linear_math.h"

namespace hypic::linear {

std::vector<float> ConvTaps(const float* weight, int channels, int kernel) {
  std::vector<float> taps(static_cast<size_t>(int64_t{kernel} * channels));
  for (int c = 0; c < channels; ++c) {
    for (int j = 0; j < kernel; ++j) {
      taps[static_cast<size_t>(int64_t{j} * channels + c)] = weight[int64_t{c} * kernel + j];
    }
  }
  return taps;
}

namespace {

// Channels [c, c + W) of output row t: the sum for each channel stays in registers across the
// taps (a fixed W unrolls fully) and y is written once. Each element is bias, then + tap 0,
// ..., + tap K-1, in that order, each tap one fused multiply-add, written out: left to the
// compiler, a 64-wide block and a single channel were contracted differently and rounded apart.
template <int W>
[[gnu::always_inline]] inline void ConvBlock(const ConvShape& shape, const float* x, int64_t ldx,
                                             const float* taps, const float* bias,
                                             const float* state, int64_t t, int64_t c, float* y,
                                             bool apply_silu) {
  const int K = shape.kernel, C = shape.channels;
  float acc[W];
#pragma GCC unroll 64
  for (int i = 0; i < W; ++i) acc[i] = bias != nullptr ? bias[c + i] : 0.0f;
  for (int j = 0; j < K; ++j) {
    // Window row t + j: the state's K-1 rows, then x's (input position t + j - (K-1)).
    const int64_t p = t + j;
    const float* xr = (p < K - 1 ? state + p * C : x + (p - (K - 1)) * ldx) + c;
    const float* wj = taps + int64_t{j} * C + c;
#pragma GCC unroll 64
    for (int i = 0; i < W; ++i) acc[i] = std::fma(wj[i], xr[i], acc[i]);
  }
  if (apply_silu) {
    for (int i = 0; i < W; ++i) acc[i] = Silu(acc[i]);
  }
  std::memcpy(y, acc, sizeof acc);
}

}  // namespace

void ConvRows(const ConvShape& shape, const float* x, int64_t ldx, const float* taps,
              const float* bias, const float* state, int64_t t0, int64_t t1, float* y, int64_t ldy,
              bool apply_silu) {
  // Whole blocks of kBlock channels in registers (four AVX-512 vectors), the rest one channel
  // at a time: 7x faster than a block's sums in a stack array loaded and stored on every tap.
  constexpr int kBlock = 64;
  const int C = shape.channels;
  for (int64_t t = t0; t < t1; ++t) {
    float* yt = y + (t - t0) * ldy;
    int c = 0;
    for (; c + kBlock <= C; c += kBlock) {
      ConvBlock<kBlock>(shape, x, ldx, taps, bias, state, t, c, yt + c, apply_silu);
    }
    for (; c < C; ++c) ConvBlock<1>(shape, x, ldx, taps, bias, state, t, c, yt + c, apply_silu);
  }
}

void AdvanceConvState(const ConvShape& shape, const float* x, int64_t ldx, float* state) {
  const int K = shape.kernel, C = shape.channels;
  const int64_t T = shape.tokens;
  if (K <= 1 || T <= 0) return;
  // The new state is the last K-1 window rows. Row i is window row T + i > i, so in place, in
  // order: an old state row (T < K-1) is read before its own slot is written (a compose makes
  // ~100 of these a pass, each once a temporary's allocation, fill and copy back).
  for (int64_t i = 0; i < K - 1; ++i) {
    const int64_t p = T + i;  // window row
    const float* src = p < K - 1 ? state + p * C : x + (p - (K - 1)) * ldx;
    std::memcpy(state + i * C, src, static_cast<size_t>(C) * sizeof(float));
  }
}

void CausalConv(const ConvShape& shape, const float* x, const float* weight, const float* bias,
                float* state, float* y, bool apply_silu) {
  const int K = shape.kernel, C = shape.channels;
  if (shape.tokens <= 0 || C <= 0 || K <= 0) return;
  const std::vector<float> taps = ConvTaps(weight, C, K);
  cpu::ParallelFor(shape.tokens, 16, [&](int64_t t0, int64_t t1) {
    ConvRows(shape, x, C, taps.data(), bias, state, t0, t1, y + t0 * C, C, apply_silu);
  });
  AdvanceConvState(shape, x, C, state);
}

}  // namespace hypic::linear

#include "gpu/linear/short_conv.h"

#include <algorithm>
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

void ConvRows(const ConvShape& shape, const float* x, int64_t ldx, const float* taps,
              const float* bias, const float* state, int64_t t0, int64_t t1, float* y, int64_t ldy,
              bool apply_silu) {
  const int K = shape.kernel, C = shape.channels;
  // window = [state (K-1 rows) | x (T rows)]: row p of the window is input position p-(K-1).
  auto row = [&](int64_t p) -> const float* {
    return p < K - 1 ? state + p * C : x + (p - (K - 1)) * ldx;
  };
  // Per block of kBlock channels, the sum stays in registers across the taps and y is written
  // once (rather than a zero pass and K read-modify-write passes over the row). Each element
  // is still bias, then + tap 0, ..., + tap K-1, in that order: the bits of the plain loop.
  constexpr int kBlock = 64;
  for (int64_t t = t0; t < t1; ++t) {
    float* yt = y + (t - t0) * ldy;
    for (int c0 = 0; c0 < C; c0 += kBlock) {
      const int n = std::min(kBlock, C - c0);
      float acc[kBlock];
      for (int i = 0; i < n; ++i) acc[i] = bias != nullptr ? bias[c0 + i] : 0.0f;
      for (int j = 0; j < K; ++j) {
        const float* xr = row(t + j) + c0;
        const float* wj = taps + int64_t{j} * C + c0;
        for (int i = 0; i < n; ++i) acc[i] += wj[i] * xr[i];
      }
      if (apply_silu) {
        for (int i = 0; i < n; ++i) acc[i] = Silu(acc[i]);
      }
      std::memcpy(yt + c0, acc, static_cast<size_t>(n) * sizeof(float));
    }
  }
}

void AdvanceConvState(const ConvShape& shape, const float* x, int64_t ldx, float* state) {
  const int K = shape.kernel, C = shape.channels;
  const int64_t T = shape.tokens;
  if (K <= 1 || T <= 0) return;
  // The new state is the last K-1 window rows; built in a temporary first because the rows
  // may come from the old state (T < K-1).
  std::vector<float> next(static_cast<size_t>(int64_t{K - 1} * C));
  for (int64_t i = 0; i < K - 1; ++i) {
    const int64_t p = T + i;  // window row
    const float* src = p < K - 1 ? state + p * C : x + (p - (K - 1)) * ldx;
    std::memcpy(next.data() + i * C, src, static_cast<size_t>(C) * sizeof(float));
  }
  std::copy(next.begin(), next.end(), state);
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

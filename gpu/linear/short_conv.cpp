#include "gpu/linear/short_conv.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "gpu/cpu/compute_threads.h"
#include "gpu/linear/linear_math.h"

namespace hypic::linear {

void CausalConv(const ConvShape& shape, const float* x, const float* weight, const float* bias,
                float* state, float* y, bool apply_silu) {
  const int K = shape.kernel, C = shape.channels;
  const int64_t T = shape.tokens;
  if (T <= 0 || C <= 0 || K <= 0) return;
  // window = [state (K-1 rows) | x (T rows)]: row p of the window is input position p-(K-1).
  auto row = [&](int64_t p) -> const float* {
    return p < K - 1 ? state + p * C : x + (p - (K - 1)) * C;
  };
  // The taps by position, [K, C], so the loops over channels read contiguous weights.
  std::vector<float> taps(static_cast<size_t>(int64_t{K} * C));
  for (int c = 0; c < C; ++c) {
    for (int j = 0; j < K; ++j)
      taps[static_cast<size_t>(int64_t{j} * C + c)] = weight[int64_t{c} * K + j];
  }
  cpu::ParallelFor(T, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* yt = y + t * C;
      for (int c = 0; c < C; ++c) yt[c] = bias != nullptr ? bias[c] : 0.0f;
      for (int j = 0; j < K; ++j) {
        const float* xr = row(t + j);
        const float* wj = taps.data() + int64_t{j} * C;
        for (int c = 0; c < C; ++c) yt[c] += wj[c] * xr[c];
      }
      if (apply_silu) {
        for (int c = 0; c < C; ++c) yt[c] = Silu(yt[c]);
      }
    }
  });
  // The new state is the last K-1 window rows; compute into a temporary first because the
  // rows may come from the old state (T < K-1).
  if (K > 1) {
    std::vector<float> next(int64_t{K - 1} * C);
    for (int i = 0; i < K - 1; ++i) {
      std::memcpy(next.data() + int64_t{i} * C, row(T + i), C * sizeof(float));
    }
    std::copy(next.begin(), next.end(), state);
  }
}

}  // namespace hypic::linear

// The short causal depthwise conv that precedes the recurrence in gdn, kda and mamba2
// (MATH.md §3): y_t[c] = act(bias[c] + sum_{j<K} w[c,j] * x_{t-K+1+j}[c]), act = SiLU.
// The conv state is the last K-1 PRE-conv inputs, [K-1, C] oldest first; it is read as the
// left context and updated in place. Thread-compatible.
#pragma once

#include <cstdint>

namespace hypic::linear {

struct ConvShape {
  int64_t tokens = 0;
  int32_t channels = 0;
  int32_t kernel = 4;
};

// x [T, C], weight [C, K], bias [C] or nullptr, state [K-1, C] (in/out), y [T, C].
// `apply_silu` false gives the bare conv (for tests and for layers without activation).
void CausalConv(const ConvShape& shape, const float* x, const float* weight, const float* bias,
                float* state, float* y, bool apply_silu = true);

}  // namespace hypic::linear

// The short causal depthwise conv that precedes the recurrence in gdn, kda and mamba2
// (MATH.md §3): y_t[c] = act(bias[c] + sum_{j<K} w[c,j] * x_{t-K+1+j}[c]), act = SiLU.
// The conv state is the last K-1 PRE-conv inputs, [K-1, C] oldest first; it is read as the
// left context and updated in place. Thread-compatible.
//
// CausalConv is the whole step. Its pieces (ConvTaps, ConvRows, AdvanceConvState) let a caller
// fuse the conv into its own row loop, with the input read in place (row stride ldx) and the
// output kept in a tile of its own; the pieces give the same bits as CausalConv.
#pragma once

#include <cstdint>
#include <vector>

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

// The taps by position, [K, C], from weight [C, K], so the loops over channels read
// contiguous weights.
std::vector<float> ConvTaps(const float* weight, int channels, int kernel);

// Output rows [t0, t1) into y (row t at y + (t - t0) * ldy), input row t at x + t * ldx, the
// state (not advanced) as the left context, taps from ConvTaps.
void ConvRows(const ConvShape& shape, const float* x, int64_t ldx, const float* taps,
              const float* bias, const float* state, int64_t t0, int64_t t1, float* y, int64_t ldy,
              bool apply_silu);

// Moves the state on past all shape.tokens input rows (x row t at x + t * ldx); call it after
// every ConvRows of the step, which read the old state.
void AdvanceConvState(const ConvShape& shape, const float* x, int64_t ldx, float* state);

}  // namespace hypic::linear

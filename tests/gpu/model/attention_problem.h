// A random causal-attention problem for the attention tests (cpu_attention_test,
// attention_tile_math_test): the shape, each query row's absolute position, and unit-variance
// q, k and v (logits q.k / sqrt(hd) of unit scale, as after the q/k norms), keys covering
// positions [0, last row's position]. Header-only test support.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "gpu/model/forward_kernels.h"
#include "tests/support/seeded_rng.h"

namespace hypic::model::testing {

struct AttentionProblem {
  AttentionShape shape;
  std::vector<int64_t> positions;
  std::vector<float> q, k, v;  // q: [rows, heads, hd]; k, v: [keys, kv_heads, hd]
};

inline AttentionProblem MakeAttentionProblem(int64_t heads, int64_t kv_heads, int64_t hd,
                                             std::vector<int64_t> positions, uint64_t seed) {
  AttentionProblem p{{heads, kv_heads, hd}, std::move(positions), {}, {}, {}};
  hypic::testing::SeededRng rng(seed);
  const auto rows = static_cast<int64_t>(p.positions.size());
  const int64_t keys = p.positions.back() + 1;
  p.q = rng.NormalVector(static_cast<size_t>(rows * heads * hd));
  p.k = rng.NormalVector(static_cast<size_t>(keys * kv_heads * hd));
  p.v = rng.NormalVector(static_cast<size_t>(keys * kv_heads * hd));
  return p;
}

// Positions from, from + 1, ..., from + n - 1.
inline std::vector<int64_t> Contiguous(int64_t from, int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = from + i;
  return p;
}

}  // namespace hypic::model::testing

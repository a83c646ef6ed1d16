// The device attention's math (attention_tile_math.h) on the CPU: a tiled and a split-K causal
// attention assembled from exactly those functions, cut into blocks by PlanAttentionTiles as
// the kernels cut them, against CausalAttention's fp32 path (cpu_attention.h) within 1e-5
// relative: head_dim 64 and 128, GQA 1 and 4 (and the packing of groups wider than a tile),
// ragged rows and keys, query rows after a cached prefix, and 1 or 8 rows over 5000 keys for
// split-K. Then the pieces' edge cases: empty blocks and partials, exact rescales.
#include "gpu/model/attention_tile_math.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpu/model/cpu_attention.h"
#include "tests/gpu/model/attention_problem.h"
#include "tests/gpu/model/model_test_util.h"
#include "tests/support/seeded_rng.h"

namespace hypic::model {
namespace {

using testing::AttentionProblem;
using testing::Contiguous;
using testing::MakeAttentionProblem;

using testing::RelErr;

std::vector<float> CpuAttention(const AttentionProblem& p) {
  std::vector<float> out(p.q.size(), -1.0f);
  AlignedVector<uint32_t> pack;
  CausalAttention(p.shape, p.q.data(), p.k.data(), p.v.data(), out.data(), p.positions, &pack);
  return out;
}

// One block's result: per packed row its softmax and unnormalised output.
struct BlockResult {
  std::vector<SoftmaxRow> rows;
  std::vector<float> acc;  // [kAttentionRowTile, hd]
};

// The tile kernel's block (tile, group, split) of AttentionTileKernel: kAttentionKeyTile keys
// at a time, scores, the block max over visible keys, Advance, weights, Accumulate, PV.
BlockResult RunBlock(const AttentionProblem& p, const AttentionTiles& t, int64_t tile,
                     int64_t group, int64_t split) {
  const int64_t hd = p.shape.head_dim, ldq = p.shape.heads * hd, ldk = p.shape.kv_heads * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t live = t.Live(tile), g = t.KvHead(group);
  const int64_t kb = t.KeyBegin(split);
  const int64_t ke = t.KeyEnd(split, p.positions[static_cast<size_t>(t.Row(tile, live - 1))]);
  BlockResult b{std::vector<SoftmaxRow>(kAttentionRowTile),
                std::vector<float>(static_cast<size_t>(kAttentionRowTile * hd), 0.0f)};
  for (int64_t k0 = kb; k0 < ke; k0 += kAttentionKeyTile) {
    const int64_t n_keys = std::min(kAttentionKeyTile, ke - k0);
    for (int64_t m = 0; m < live; ++m) {
      const int64_t pos = p.positions[static_cast<size_t>(t.Row(tile, m))];
      const float* qr = p.q.data() + t.Row(tile, m) * ldq + t.Head(group, m) * hd;
      float s[kAttentionKeyTile];
      bool visible[kAttentionKeyTile];
      float block_max = -INFINITY;
      for (int64_t n = 0; n < n_keys; ++n) {
        const float* kr = p.k.data() + (k0 + n) * ldk + g * hd;
        float dot = 0.0f;
        for (int64_t d = 0; d < hd; ++d) dot = std::fma(qr[d], kr[d], dot);
        s[n] = dot * scale;
        visible[n] = KeyVisible(pos, k0 + n);
        if (visible[n]) block_max = std::max(block_max, s[n]);
      }
      SoftmaxRow& row = b.rows[static_cast<size_t>(m)];
      const float rescale = row.Advance(block_max);
      float block_sum = 0.0f;
      for (int64_t n = 0; n < n_keys; ++n) block_sum += s[n] = row.Weight(s[n], visible[n]);
      row.Accumulate(block_sum);
      float* acc = b.acc.data() + m * hd;
      for (int64_t d = 0; d < hd; ++d) acc[d] *= rescale;
      for (int64_t n = 0; n < n_keys; ++n) {
        const float* vr = p.v.data() + (k0 + n) * ldk + g * hd;
        for (int64_t d = 0; d < hd; ++d) acc[d] = std::fma(s[n], vr[d], acc[d]);
      }
    }
  }
  return b;
}

// Every block of the plan; without split-K each block's rows are normalised into out, with it
// the ranges' partials are merged in range order (CombineKernel) first.
std::vector<float> TiledAttention(const AttentionProblem& p, const AttentionTiles& t) {
  const int64_t hd = p.shape.head_dim, heads = p.shape.heads;
  std::vector<float> out(p.q.size(), -1.0f);
  std::vector<SoftmaxRow> merged(static_cast<size_t>(t.rows * heads));
  std::vector<float> o(p.q.size(), 0.0f);
  for (int64_t tile = 0; tile < t.row_tiles; ++tile) {
    for (int64_t group = 0; group < t.head_groups; ++group) {
      for (int64_t split = 0; split < t.splits; ++split) {
        const BlockResult b = RunBlock(p, t, tile, group, split);
        for (int64_t m = 0; m < t.Live(tile); ++m) {
          const int64_t at = t.Row(tile, m) * heads + t.Head(group, m);
          const MergeFactors f =
              MergePartial(&merged[static_cast<size_t>(at)], b.rows[static_cast<size_t>(m)]);
          for (int64_t d = 0; d < hd; ++d) {
            float& x = o[static_cast<size_t>(at * hd + d)];
            x = f.self * x + f.other * b.acc[static_cast<size_t>(m * hd + d)];
          }
        }
      }
    }
  }
  for (int64_t at = 0; at < t.rows * heads; ++at) {
    const float inv = 1.0f / merged[static_cast<size_t>(at)].sum;
    for (int64_t d = 0; d < hd; ++d) {
      out[static_cast<size_t>(at * hd + d)] = o[static_cast<size_t>(at * hd + d)] * inv;
    }
  }
  return out;
}

AttentionTiles Plan(const AttentionProblem& p) {
  return PlanAttentionTiles(p.shape.heads, p.shape.kv_heads,
                            static_cast<int64_t>(p.positions.size()), p.positions.back() + 1);
}

constexpr double kBound = 1e-5;

TEST_CASE("tiled attention from the tile math matches CausalAttention") {
  for (int64_t hd : {64, 128}) {
    for (int64_t ratio : {1, 4}) {
      // Ragged: 150 rows (not a multiple of 64 nor of 16) and, after a 37-token prefix, 187 keys.
      for (int64_t prefix : {0, 37}) {
        CAPTURE(hd);
        CAPTURE(ratio);
        CAPTURE(prefix);
        const AttentionProblem p =
            MakeAttentionProblem(2 * ratio, 2, hd, Contiguous(prefix, 150), hd + ratio);
        const AttentionTiles t = Plan(p);
        REQUIRE_FALSE(t.split());
        CHECK(t.tiling.heads == ratio);
        CHECK(RelErr(TiledAttention(p, t), CpuAttention(p)) <= kBound);
      }
    }
  }
}

TEST_CASE("tiled attention: seam rows spread over a long context, and groups wider than a tile") {
  std::vector<int64_t> seams;
  for (int64_t s = 0; s < 6; ++s) {
    for (int64_t i = 0; i < 5; ++i) seams.push_back(s * 97 + i);
  }
  for (int64_t i = 0; i < 9; ++i) seams.push_back(600 + i);
  const AttentionProblem spread = MakeAttentionProblem(8, 2, 64, seams, 21);
  CHECK(RelErr(TiledAttention(spread, Plan(spread)), CpuAttention(spread)) <= kBound);

  // 96 heads on one kv head: 48 of them per tile (the largest divisor within 64), one position.
  const AttentionProblem wide = MakeAttentionProblem(96, 1, 16, Contiguous(3, 20), 22);
  const AttentionTiles t = Plan(wide);
  CHECK(t.tiling.heads == 48);
  CHECK(t.tiling.positions == 1);
  CHECK(t.head_groups == 2);
  CHECK(RelErr(TiledAttention(wide, t), CpuAttention(wide)) <= kBound);
}

TEST_CASE("split-K attention from the tile math matches CausalAttention") {
  for (int64_t hd : {64, 128}) {
    for (int64_t ratio : {1, 4}) {
      for (int64_t rows : {1, 8}) {
        CAPTURE(hd);
        CAPTURE(ratio);
        CAPTURE(rows);
        // The rows end at key 4999: 5000 keys, not a multiple of the key tile.
        const AttentionProblem p = MakeAttentionProblem(
            2 * ratio, 2, hd, Contiguous(5000 - rows, rows), 100 + hd + ratio + rows);
        const AttentionTiles t = Plan(p);
        REQUIRE(t.split());
        CHECK(t.splits > 1);
        CHECK(t.split_keys % kAttentionKeyTile == 0);
        CHECK(t.splits * t.split_keys >= 5000);
        CHECK((t.splits - 1) * t.split_keys < 5000);
        CHECK(RelErr(TiledAttention(p, t), CpuAttention(p)) <= kBound);
      }
    }
  }
}

TEST_CASE("split-K: seam rows whose later ranges are empty for the early rows") {
  // Rows at 10..12 and 4000..4004: every range past key 12 is empty for the first three.
  std::vector<int64_t> positions = {10, 11, 12, 4000, 4001, 4002, 4003, 4004};
  const AttentionProblem p = MakeAttentionProblem(8, 2, 64, positions, 31);
  const AttentionTiles t = Plan(p);
  REQUIRE(t.split());
  CHECK(RelErr(TiledAttention(p, t), CpuAttention(p)) <= kBound);
}

TEST_CASE("more than kSplitKMaxRows rows, or keys within one range, take the prefill path") {
  CHECK_FALSE(PlanAttentionTiles(8, 2, kSplitKMaxRows + 1, 16384).split());
  CHECK(PlanAttentionTiles(8, 2, kSplitKMaxRows, 16384).split());
  CHECK_FALSE(PlanAttentionTiles(8, 2, 4, kAttentionKeyTile).split());  // one key tile
}

TEST_CASE("SoftmaxRow over blocks equals the two-pass softmax") {
  hypic::testing::SeededRng rng(5);
  const std::vector<float> s = rng.NormalVector(300);
  SoftmaxRow row;
  for (size_t b0 = 0; b0 < s.size(); b0 += 64) {
    const size_t end = std::min(s.size(), b0 + 64);
    float block_max = -INFINITY;
    for (size_t j = b0; j < end; ++j) block_max = std::max(block_max, s[j]);
    row.Advance(block_max);
    float block_sum = 0.0f;
    for (size_t j = b0; j < end; ++j) block_sum += row.Weight(s[j], true);
    row.Accumulate(block_sum);
  }
  const double mx = *std::max_element(s.begin(), s.end());
  double sum = 0.0;
  for (float x : s) sum += std::exp(x - mx);
  CHECK(row.max == static_cast<float>(mx));
  CHECK(std::abs(row.sum - sum) <= 1e-5 * sum);
}

TEST_CASE("the edge cases of Advance and MergePartial") {
  SoftmaxRow row;
  CHECK(row.Advance(-INFINITY) == 1.0f);  // a block with nothing visible, before anything
  CHECK(row.max == -INFINITY);
  CHECK(row.sum == 0.0f);
  CHECK(row.Weight(3.0f, false) == 0.0f);
  row.Advance(2.0f);
  row.Accumulate(row.Weight(2.0f, true));
  CHECK(row.sum == 1.0f);
  CHECK(row.Advance(1.0f) == 1.0f);       // max unchanged: exactly no rescale
  CHECK(row.Advance(-INFINITY) == 1.0f);  // nothing visible after something
  CHECK(std::abs(row.Advance(3.0f) - std::exp(-1.0f)) <= 1e-6f);
  CHECK(row.max == 3.0f);

  SoftmaxRow empty, also_empty;
  MergeFactors f = MergePartial(&empty, also_empty);
  CHECK(f.other == 0.0f);
  CHECK(empty.max == -INFINITY);
  CHECK(empty.sum == 0.0f);

  const SoftmaxRow part{1.5f, 4.0f};
  f = MergePartial(&empty, part);  // into an empty row: the partial as it is
  CHECK(f.self == 0.0f);
  CHECK(f.other == 1.0f);
  CHECK(empty.max == 1.5f);
  CHECK(empty.sum == 4.0f);
  f = MergePartial(&empty, SoftmaxRow{});  // an empty partial changes nothing
  CHECK(f.self == 1.0f);
  CHECK(f.other == 0.0f);
  CHECK(empty.sum == 4.0f);

  // Two non-empty sides: the log-sum-exp of both.
  SoftmaxRow a{0.0f, 2.0f};
  f = MergePartial(&a, SoftmaxRow{1.0f, 3.0f});
  CHECK(a.max == 1.0f);
  CHECK(f.other == 1.0f);
  CHECK(std::abs(f.self - std::exp(-1.0f)) <= 1e-6f);
  CHECK(std::abs(a.sum - (2.0f * std::exp(-1.0f) + 3.0f)) <= 1e-5f);
}

TEST_CASE("TileRows packs a group's heads into one row tile") {
  CHECK(TileRows(1).heads == 1);
  CHECK(TileRows(1).positions == kAttentionRowTile);
  CHECK(TileRows(4).positions == kAttentionRowTile / 4);
  CHECK(TileRows(3).heads == 3);  // 21 positions: 63 of the 64 rows used
  CHECK(TileRows(3).positions == 21);
  CHECK(TileRows(128).heads == 64);
  CHECK(TileRows(96).heads == 48);
}

}  // namespace
}  // namespace hypic::model

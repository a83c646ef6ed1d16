// The arithmetic of the device's tiled causal attention (gpu/cuda/model/attention_kernels.cu) as
// HYPIC_HD inline functions, so a CPU test can assemble the same tiled and split-K attention
// out of them and hold it to cpu_attention.h's. Semantics are cpu_attention.cpp's fp32 path:
// scores q.k / sqrt(head_dim), a row at position p sees the keys at positions [0, p], and the
// softmax is online (a running max and sum per row; whatever was accumulated is rescaled by
// FastExp(old max - new max) when a block raises the max; weights FastExp(score - max)).
//
// The tiles: a block of kAttentionRowTile query rows, where a row is one (position, head) of a
// GQA group (the heads that share a kv head are packed together so each K/V tile is read once
// for the group), against kAttentionKeyTile keys at a time. The split-K path for calls of at
// most kSplitKMaxRows rows cuts the key axis into ranges of SplitKeyRange keys, each giving a
// partial (max, sum, unnormalised o) per row, merged exactly afterwards by MergePartial.
// AttentionTiles is the cut of one call into blocks, shared by the kernels and the test.
//
// Stateless values and pure functions; thread-compatible.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/hd.h"
#include "gpu/linear/linear_math.h"  // FastExp

namespace hypic::model {

inline constexpr int64_t kAttentionRowTile = 64;  // packed (position, head) rows per tile
inline constexpr int64_t kAttentionKeyTile = 64;  // keys per tile
inline constexpr int64_t kSplitKMaxRows = 16;     // calls with at most this many rows split K
// The split-K path aims at about this many blocks (two waves of a 132-SM H200).
inline constexpr int64_t kSplitKTargetBlocks = 264;

// Causal visibility: the row at position `query_pos` attends the key at `key_pos`.
HYPIC_HD_INLINE bool KeyVisible(int64_t query_pos, int64_t key_pos) { return key_pos <= query_pos; }

// One row's online softmax. max is -inf and sum 0 until a block with a visible key arrives.
struct SoftmaxRow {
  float max = -INFINITY;
  float sum = 0.0f;

  // Starts a block whose visible scores have maximum `block_max` (-inf: none visible): moves
  // max on, rescales sum, and returns the factor for the row's accumulated output (1 while
  // nothing has been seen; e^-87.3, as good as 0 against sum = 0, on the first block).
  HYPIC_HD_INLINE float Advance(float block_max) {
    const float m = fmaxf(max, block_max);
    if (m == -INFINITY) return 1.0f;
    const float rescale = linear::FastExp(max - m);
    sum *= rescale;
    max = m;
    return rescale;
  }
  // The weight of a score of the current block (after Advance); 0 for a key not visible.
  HYPIC_HD_INLINE float Weight(float score, bool visible) const {
    return visible ? linear::FastExp(score - max) : 0.0f;
  }
  // Adds the block's weights (their sum) once they are all known.
  HYPIC_HD_INLINE void Accumulate(float block_sum) { sum += block_sum; }
};

// The factors that merge two partials (this row's accumulated o and another's) of disjoint key
// ranges: o = self * o + other * o_other.
struct MergeFactors {
  float self;
  float other;
};

// Merges `other` (the softmax of a disjoint key range) into `row` and returns the factors for
// the outputs: the log-sum-exp merge, with max = max of both and each side rescaled to it. An
// empty side (max -inf) gets factor 0; two empty sides stay empty.
HYPIC_HD_INLINE MergeFactors MergePartial(SoftmaxRow* row, const SoftmaxRow& other) {
  const float m = fmaxf(row->max, other.max);
  if (m == -INFINITY) return {1.0f, 0.0f};
  const float a = row->max == -INFINITY ? 0.0f : linear::FastExp(row->max - m);
  const float b = other.max == -INFINITY ? 0.0f : linear::FastExp(other.max - m);
  row->sum = row->sum * a + other.sum * b;
  row->max = m;
  return {a, b};
}

// The packing of a GQA group into row tiles: `heads` (a divisor of the group, at most
// kAttentionRowTile) query heads share a tile, `positions` query rows of each.
struct RowTiling {
  int64_t heads;
  int64_t positions;
};

HYPIC_HD_INLINE RowTiling TileRows(int64_t group) {
  int64_t heads = group < kAttentionRowTile ? group : kAttentionRowTile;
  while (group % heads != 0) --heads;
  return {heads, kAttentionRowTile / heads};
}

// The keys per split-K range (a multiple of kAttentionKeyTile) for `keys` (>= 1) keys when
// `other_blocks` blocks (row tiles times head groups) share each range.
HYPIC_HD_INLINE int64_t SplitKeyRange(int64_t keys, int64_t other_blocks) {
  const int64_t tiles = (keys + kAttentionKeyTile - 1) / kAttentionKeyTile;
  int64_t splits = (kSplitKTargetBlocks + other_blocks - 1) / other_blocks;
  splits = splits < 1 ? 1 : (splits > tiles ? tiles : splits);
  return (tiles + splits - 1) / splits * kAttentionKeyTile;
}

// How one call's query rows and keys are cut into blocks: a block is (row tile, head group,
// key range). A head group is `tiling.heads` consecutive query heads of one kv head; packed
// row m of a tile is query row tile * tiling.positions + m / tiling.heads of the group's head
// m % tiling.heads. Without split-K (split_keys 0) a block's keys are all its rows see.
struct AttentionTiles {
  int64_t rows = 0;
  int64_t group = 1;  // query heads per kv head
  RowTiling tiling{1, kAttentionRowTile};
  int64_t row_tiles = 0;
  int64_t head_groups = 0;  // kv_heads * group / tiling.heads
  int64_t split_keys = 0;
  int64_t splits = 1;

  HYPIC_HD_INLINE bool split() const { return split_keys > 0; }
  HYPIC_HD_INLINE int64_t KvHead(int64_t head_group) const {
    return head_group / (group / tiling.heads);
  }
  HYPIC_HD_INLINE int64_t FirstHead(int64_t head_group) const {
    return KvHead(head_group) * group + head_group % (group / tiling.heads) * tiling.heads;
  }
  HYPIC_HD_INLINE int64_t FirstRow(int64_t tile) const { return tile * tiling.positions; }
  // The tile's real packed rows [0, Live(tile)) (the last tile may be short).
  HYPIC_HD_INLINE int64_t Live(int64_t tile) const {
    const int64_t left = rows - FirstRow(tile);
    return (left < tiling.positions ? left : tiling.positions) * tiling.heads;
  }
  HYPIC_HD_INLINE int64_t Row(int64_t tile, int64_t m) const {
    return FirstRow(tile) + m / tiling.heads;
  }
  HYPIC_HD_INLINE int64_t Head(int64_t head_group, int64_t m) const {
    return FirstHead(head_group) + m % tiling.heads;
  }
  // Key range `split_index` of a tile whose last row is at position last_pos is [KeyBegin,
  // KeyEnd): the keys it sees of the range (possibly none).
  HYPIC_HD_INLINE int64_t KeyBegin(int64_t split_index) const { return split_index * split_keys; }
  HYPIC_HD_INLINE int64_t KeyEnd(int64_t split_index, int64_t last_pos) const {
    const int64_t seen = last_pos + 1;
    if (!split()) return seen;
    const int64_t end = (split_index + 1) * split_keys;
    return end < seen ? end : seen;
  }
};

// REQUIRES: rows >= 1, keys >= 1, heads a multiple of kv_heads. Split-K when rows <=
// kSplitKMaxRows and the keys make more than one range.
inline AttentionTiles PlanAttentionTiles(int64_t heads, int64_t kv_heads, int64_t rows,
                                         int64_t keys) {
  AttentionTiles t;
  t.rows = rows;
  t.group = heads / kv_heads;
  t.tiling = TileRows(t.group);
  t.row_tiles = (rows + t.tiling.positions - 1) / t.tiling.positions;
  t.head_groups = kv_heads * (t.group / t.tiling.heads);
  if (rows <= kSplitKMaxRows) {
    const int64_t range = SplitKeyRange(keys, t.row_tiles * t.head_groups);
    if (range < keys) {  // one range would be the prefill path plus a needless combine
      t.split_keys = range;
      t.splits = (keys + range - 1) / range;
    }
  }
  return t;
}

}  // namespace hypic::model

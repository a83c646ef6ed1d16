// Causal GQA attention on a CUDA device, fp32 (ForwardKernels::Attention's contract,
// forward_kernels.h), in two shapes chosen by the number of query rows:
//   - prefill (more than kSplitKMaxRows rows): flash-style tiles. A block holds a tile of
//     kAttentionRowTile packed (position, head) rows of one GQA group in shared memory and
//     streams the K/V tiles of kAttentionKeyTile keys up to the tile's last position, each read
//     once for every head of the group, with an online softmax per row; no score matrix
//     outlives a tile.
//   - decode / seam rows (at most kSplitKMaxRows rows over more keys than one range holds,
//     PlanAttentionTiles): split-K. The same tile kernel over one key range per block writes
//     a partial (max, sum, unnormalised o) per row to a workspace, and a combine kernel merges
//     the ranges exactly (MergePartial).
// The arithmetic is attention_tile_math.h's (the CPU test builds both shapes from it); this
// file is the thread mapping. fp32 FMA products throughout (no tensor cores), so the result is
// the CPU's fp32 attention up to summation order.
//
// Buffers are the caller's device memory; everything is enqueued on the given stream, nothing
// is synchronised. Thread-compatible.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"
#include "gpu/model/attention_tile_math.h"
#include "gpu/model/forward_kernels.h"

namespace hypic::model {

// The largest head_dim the kernels take (shared memory and per-thread registers scale with it:
// above 128 a block needs 148 KB of shared memory, which sm_80 and sm_90 have; on a smaller
// part the launch fails with kDeviceError).
inline constexpr int64_t kCudaAttentionMaxHeadDim = 256;

// How one call runs: its shape and its cut into blocks (split-K or not).
struct CudaAttentionPlan {
  AttentionShape shape;
  AttentionTiles tiles;

  // Floats of device workspace LaunchCudaAttention needs (0 on the prefill path).
  int64_t WorkspaceFloats() const;
};

// REQUIRES: rows >= 1, heads a multiple of kv_heads, 1 <= head_dim <= kCudaAttentionMaxHeadDim,
// keys = positions.back() + 1.
CudaAttentionPlan PlanCudaAttention(const AttentionShape& shape, int64_t rows, int64_t keys);

// Enqueues the plan's kernels: q/out [rows, heads, hd], k/v [keys, kv_heads, hd], `positions`
// the rows' positions (device memory, non-decreasing), `workspace` at least
// plan.WorkspaceFloats() floats. Returns kDeviceError when a launch fails.
Status LaunchCudaAttention(const CudaAttentionPlan& plan, const float* q, const float* k,
                           const float* v, float* out, const int64_t* positions, float* workspace,
                           cudaStream_t stream);

}  // namespace hypic::model

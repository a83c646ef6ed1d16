// The tiled attention kernels (attention_kernels.cuh). Thread mapping of the tile kernel, 256
// threads as 16 x 16 (ty, tx):
//   - shared memory holds the row tile Q [64][hd + 1], one K or V tile [64][hd + 1] (K for the
//     scores, then V in the same buffer for PV, so hd 128 takes 83 KB and two blocks fit an
//     SM) and the tile's weights P [64][65]; the +1 pads make the strided reads conflict-free;
//   - thread (ty, tx) owns rows ty + 16 i and keys tx + 16 j (i, j < 4) of the 64 x 64 scores,
//     and the same rows times columns tx + 16 c of the output accumulator (registers). A row's
//     16 threads sit in one half-warp, so its max and sum are xor-shuffle reductions, after
//     which every one of them holds the same SoftmaxRow;
//   - a block is (row tile, head group, key range) of AttentionTiles, whose packed rows are
//     several heads of one GQA group, so each K/V tile is loaded once for all of them. Row
//     tiles go in reverse, the longest (latest positions) first.
// The split-K grid adds a z axis over key ranges; each range's partial goes to the workspace
// as [splits][rows][heads] (max, sum) pairs and [splits][rows][heads][hd] unnormalised outputs,
// and the combine kernel (one warp per (row, head)) merges them in range order.
#include <cuda_runtime.h>

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/model/attention_kernels.cuh"
#include "gpu/model/attention_tile_math.h"

namespace hypic::model {
namespace {

constexpr int kTileThreads = 256;
constexpr int kRowLanes = 16;  // threads sharing a row (tx)
constexpr int kRowsPerThread = static_cast<int>(kAttentionRowTile) / (kTileThreads / kRowLanes);
constexpr int kKeysPerThread = static_cast<int>(kAttentionKeyTile) / kRowLanes;
constexpr int kLdp = static_cast<int>(kAttentionKeyTile) + 1;  // P's padded row stride
constexpr int kCombineThreads = 256;
static_assert(kRowsPerThread * (kTileThreads / kRowLanes) == kAttentionRowTile);
static_assert(kKeysPerThread * kRowLanes == kAttentionKeyTile);

// One call's operands and geometry, by value to every block.
struct TileArgs {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  const int64_t* positions;
  float* partial_o;      // split-K only: [splits][rows][heads][hd]
  float* partial_stats;  // split-K only: [splits][rows][heads] (max, sum)
  AttentionTiles tiles;
  int64_t heads, kv_heads, head_dim;
  float scale;
};

size_t SharedBytes(int64_t hd) {
  const auto ld = static_cast<size_t>(hd + 1);
  return sizeof(float) * ((kAttentionRowTile + kAttentionKeyTile) * ld + kAttentionRowTile * kLdp);
}

// Rows [0, rows) of a tile into dst (row stride ld): row n from row_ptr(n), or zeros where that
// is null. Warp w takes rows w, w + 8, ...; its lanes the columns.
template <typename RowPtr>
__device__ void LoadTile(float* dst, int rows, int ld, int hd, RowPtr row_ptr) {
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  for (int n = warp; n < rows; n += kTileThreads / 32) {
    const float* src = row_ptr(n);
    for (int d = lane; d < hd; d += 32) dst[n * ld + d] = src != nullptr ? src[d] : 0.0f;
  }
}

// Reductions over a row's 16 threads (one half-warp; every lane ends with the result).
__device__ __forceinline__ float RowMax(float x) {
  for (int off = kRowLanes / 2; off > 0; off /= 2) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  }
  return x;
}
__device__ __forceinline__ float RowSum(float x) {
  for (int off = kRowLanes / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// One row tile of one GQA group (blockIdx.x, blockIdx.y) over the keys it sees, or with kSplit
// over the key range blockIdx.z only. kHdMax bounds head_dim (the accumulator's columns).
template <int kHdMax, bool kSplit>
__global__ void __launch_bounds__(kTileThreads) AttentionTileKernel(TileArgs a) {
  constexpr int kCols = kHdMax / kRowLanes;
  extern __shared__ float smem[];
  const int hd = static_cast<int>(a.head_dim), ld = hd + 1;
  float* qs = smem;
  float* kvs = qs + kAttentionRowTile * ld;
  float* ps = kvs + kAttentionKeyTile * ld;
  const int tx = static_cast<int>(threadIdx.x) % kRowLanes;
  const int ty = static_cast<int>(threadIdx.x) / kRowLanes;

  const AttentionTiles& t = a.tiles;
  const int64_t tile = gridDim.x - 1 - blockIdx.x, group = blockIdx.y;
  const int64_t g = t.KvHead(group);
  const int live = static_cast<int>(t.Live(tile));  // packed rows [0, live) are real
  const int64_t ldq = a.heads * hd, ldk = a.kv_heads * hd;
  auto q_row = [&](int m) -> const float* {
    return m < live ? a.q + t.Row(tile, m) * ldq + t.Head(group, m) * hd : nullptr;
  };

  int64_t pos[kRowsPerThread];
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int m = ty + 16 * i;
    pos[i] = m < live ? a.positions[t.Row(tile, m)] : -1;  // -1 sees nothing
  }
  const int64_t kb = t.KeyBegin(blockIdx.z);
  const int64_t ke = t.KeyEnd(blockIdx.z, a.positions[t.Row(tile, live - 1)]);

  LoadTile(qs, kAttentionRowTile, ld, hd, q_row);
  SoftmaxRow row[kRowsPerThread];
  float acc[kRowsPerThread][kCols] = {};
  for (int64_t k0 = kb; k0 < ke; k0 += kAttentionKeyTile) {
    const int n_keys = static_cast<int>(ke - k0 < kAttentionKeyTile ? ke - k0 : kAttentionKeyTile);
    const float* kt = a.k + k0 * ldk + g * hd;
    const float* vt = a.v + k0 * ldk + g * hd;
    __syncthreads();  // the previous tile's PV is done with kvs and ps
    LoadTile(kvs, kAttentionKeyTile, ld, hd,
             [&](int n) { return n < n_keys ? kt + n * ldk : nullptr; });
    __syncthreads();

    float s[kRowsPerThread][kKeysPerThread] = {};
    for (int d = 0; d < hd; ++d) {
      float qv[kRowsPerThread], kv[kKeysPerThread];
      for (int i = 0; i < kRowsPerThread; ++i) qv[i] = qs[(ty + 16 * i) * ld + d];
      for (int j = 0; j < kKeysPerThread; ++j) kv[j] = kvs[(tx + 16 * j) * ld + d];
      for (int i = 0; i < kRowsPerThread; ++i) {
        for (int j = 0; j < kKeysPerThread; ++j) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
      }
    }
    for (int i = 0; i < kRowsPerThread; ++i) {
      bool visible[kKeysPerThread];
      float block_max = -INFINITY;
      for (int j = 0; j < kKeysPerThread; ++j) {
        const int n = tx + 16 * j;
        visible[j] = n < n_keys && KeyVisible(pos[i], k0 + n);
        s[i][j] *= a.scale;
        if (visible[j]) block_max = fmaxf(block_max, s[i][j]);
      }
      const float rescale = row[i].Advance(RowMax(block_max));
      float block_sum = 0.0f;
      for (int j = 0; j < kKeysPerThread; ++j) {
        const float w = row[i].Weight(s[i][j], visible[j]);
        ps[(ty + 16 * i) * kLdp + tx + 16 * j] = w;
        block_sum += w;
      }
      row[i].Accumulate(RowSum(block_sum));
      for (int c = 0; c < kCols; ++c) acc[i][c] *= rescale;
    }
    __syncthreads();  // every score is read from kvs, every weight is in ps
    LoadTile(kvs, kAttentionKeyTile, ld, hd,
             [&](int n) { return n < n_keys ? vt + n * ldk : nullptr; });
    __syncthreads();

    for (int n = 0; n < n_keys; ++n) {
      float vv[kCols];
      for (int c = 0; c < kCols; ++c) {
        const int d = tx + 16 * c;
        vv[c] = d < hd ? kvs[n * ld + d] : 0.0f;
      }
      for (int i = 0; i < kRowsPerThread; ++i) {
        const float p = ps[(ty + 16 * i) * kLdp + n];
        for (int c = 0; c < kCols; ++c) acc[i][c] = fmaf(p, vv[c], acc[i][c]);
      }
    }
  }

  for (int i = 0; i < kRowsPerThread; ++i) {
    const int m = ty + 16 * i;
    if (m >= live) continue;
    const int64_t r = t.Row(tile, m), h = t.Head(group, m);
    float* dst;
    float factor = 1.0f;
    if constexpr (kSplit) {
      const int64_t p = (blockIdx.z * t.rows + r) * a.heads + h;
      dst = a.partial_o + p * hd;
      if (tx == 0) {
        a.partial_stats[2 * p] = row[i].max;
        a.partial_stats[2 * p + 1] = row[i].sum;
      }
    } else {
      dst = a.out + r * ldq + h * hd;
      factor = 1.0f / row[i].sum;
    }
    for (int c = 0; c < kCols; ++c) {
      const int d = tx + 16 * c;
      if (d < hd) dst[d] = acc[i][c] * factor;
    }
  }
}

// One warp per (row, head): the split ranges' partials merged in order, then normalised.
__global__ void __launch_bounds__(kCombineThreads) CombineKernel(TileArgs a) {
  constexpr int kPer = static_cast<int>(kCudaAttentionMaxHeadDim) / 32;
  const int64_t warp = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (warp >= a.tiles.rows * a.heads) return;  // whole warps leave together
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t hd = a.head_dim, r = warp / a.heads, h = warp % a.heads;
  SoftmaxRow row;
  float o[kPer] = {};
  for (int64_t s = 0; s < a.tiles.splits; ++s) {
    const int64_t p = (s * a.tiles.rows + r) * a.heads + h;
    const MergeFactors f =
        MergePartial(&row, SoftmaxRow{a.partial_stats[2 * p], a.partial_stats[2 * p + 1]});
    for (int j = 0; j < kPer; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < hd) o[j] = f.self * o[j] + f.other * a.partial_o[p * hd + d];
    }
  }
  const float inv = 1.0f / row.sum;
  float* dst = a.out + (r * a.heads + h) * hd;
  for (int j = 0; j < kPer; ++j) {
    const int64_t d = lane + 32 * j;
    if (d < hd) dst[d] = o[j] * inv;
  }
}

template <int kHdMax, bool kSplit>
Status LaunchTiles(const TileArgs& a, cudaStream_t stream) {
  const size_t bytes = SharedBytes(a.head_dim);
  auto* kernel = AttentionTileKernel<kHdMax, kSplit>;
  HYPIC_RETURN_IF_ERROR(
      gpu::CudaStatus(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)),
                      "cudaFuncSetAttribute(AttentionTileKernel)", __FILE__, __LINE__));
  const dim3 grid(static_cast<unsigned>(a.tiles.row_tiles),
                  static_cast<unsigned>(a.tiles.head_groups),
                  static_cast<unsigned>(a.tiles.splits));
  kernel<<<grid, kTileThreads, bytes, stream>>>(a);
  return gpu::CudaStatus(cudaGetLastError(), "AttentionTileKernel<<<>>>", __FILE__, __LINE__);
}

template <bool kSplit>
Status LaunchTilesForHeadDim(const TileArgs& a, cudaStream_t stream) {
  if (a.head_dim <= 64) return LaunchTiles<64, kSplit>(a, stream);
  if (a.head_dim <= 128) return LaunchTiles<128, kSplit>(a, stream);
  return LaunchTiles<static_cast<int>(kCudaAttentionMaxHeadDim), kSplit>(a, stream);
}

}  // namespace

int64_t CudaAttentionPlan::WorkspaceFloats() const {
  return tiles.split() ? tiles.splits * tiles.rows * shape.heads * (shape.head_dim + 2) : 0;
}

CudaAttentionPlan PlanCudaAttention(const AttentionShape& shape, int64_t rows, int64_t keys) {
  return {shape, PlanAttentionTiles(shape.heads, shape.kv_heads, rows, keys)};
}

Status LaunchCudaAttention(const CudaAttentionPlan& plan, const float* q, const float* k,
                           const float* v, float* out, const int64_t* positions, float* workspace,
                           cudaStream_t stream) {
  const AttentionShape& s = plan.shape;
  const AttentionTiles& t = plan.tiles;
  TileArgs a{};
  a.q = q;
  a.k = k;
  a.v = v;
  a.out = out;
  a.positions = positions;
  a.tiles = t;
  a.heads = s.heads;
  a.kv_heads = s.kv_heads;
  a.head_dim = s.head_dim;
  a.scale = 1.0f / sqrtf(static_cast<float>(s.head_dim));
  if (!t.split()) return LaunchTilesForHeadDim<false>(a, stream);

  a.partial_o = workspace;
  a.partial_stats = workspace + t.splits * t.rows * s.heads * s.head_dim;
  HYPIC_RETURN_IF_ERROR(LaunchTilesForHeadDim<true>(a, stream));
  const int64_t threads = t.rows * s.heads * 32;
  const auto blocks = static_cast<unsigned>((threads + kCombineThreads - 1) / kCombineThreads);
  CombineKernel<<<blocks, kCombineThreads, 0, stream>>>(a);
  return gpu::CudaStatus(cudaGetLastError(), "CombineKernel<<<>>>", __FILE__, __LINE__);
}

}  // namespace hypic::model

#include "core/dtype.h"
#include "gpu/cuda/model/launch.cuh"
#include "gpu/cuda/model/moe_kernels.cuh"
#include "gpu/model/forward_math.h"
#include "gpu/model/moe_routing.h"

namespace hypic::model {
namespace {

constexpr int kRankThreads = 256;  // 8 warps
constexpr int kPlanThreads = 1024;

// The workspace's buffers, carved in one order for the size and for the run.
struct MoeBuffers {
  int32_t* chosen;      // [rows, top_k] a row's experts, ascending
  float* weight;        // [rows, top_k] their routing weights
  int32_t* rank;        // [rows, top_k] the row's place among its expert's rows
  int32_t* counts;      // [experts]
  int32_t* tile_start;  // [experts + 1] each expert's first tile; the last: tiles in use
  const void** a1;      // [max_tiles] gate_up GEMM: the tile's expert weight
  const void** b1;      //             its gathered input rows
  void** c1;            //             its gate|up rows
  const void** a2;      // down GEMM: the expert weight
  const void** b2;      //            the SwiGLU output rows
  void** c2;            //            the output rows
  void* xg;             // [max_tiles * tile_rows, hidden] gathered x (bf16 or fp32)
  float* gu;            // [max_tiles * tile_rows, 2I]
  uint16_t* h;          // [max_tiles * tile_rows, I] bf16 SwiGLU output (bf16 weights only)
  float* out;           // [max_tiles * tile_rows, hidden]
};

// Carves `base` (null: only sizes it) into the buffers; returns the bytes used.
size_t Carve(const CudaMoeArgs& a, const CudaMoeTiling& t, char* base, MoeBuffers* b) {
  size_t at = 0;
  auto take = [&](auto** p, size_t bytes) {
    at = (at + 255) / 256 * 256;
    *p =
        base == nullptr ? nullptr : reinterpret_cast<std::remove_pointer_t<decltype(p)>>(base + at);
    at += bytes;
  };
  const auto routed = static_cast<size_t>(a.rows * a.top_k);
  const auto tiles = static_cast<size_t>(t.max_tiles);
  const auto slots = static_cast<size_t>(t.max_tiles * t.tile_rows);
  const auto hidden = static_cast<size_t>(a.hidden), im = static_cast<size_t>(a.intermediate);
  take(&b->chosen, routed * sizeof(int32_t));
  take(&b->weight, routed * sizeof(float));
  take(&b->rank, routed * sizeof(int32_t));
  take(&b->counts, static_cast<size_t>(a.experts) * sizeof(int32_t));
  take(&b->tile_start, static_cast<size_t>(a.experts + 1) * sizeof(int32_t));
  for (const void*** p : {&b->a1, &b->b1, &b->a2, &b->b2}) take(p, tiles * sizeof(void*));
  for (void*** p : {&b->c1, &b->c2}) take(p, tiles * sizeof(void*));
  take(&b->xg, slots * hidden * (a.bf16 ? sizeof(uint16_t) : sizeof(float)));
  take(&b->gu, slots * 2 * im * sizeof(float));
  take(&b->h, a.bf16 ? slots * im * sizeof(uint16_t) : 0);
  take(&b->out, slots * hidden * sizeof(float));
  return at;
}

__global__ void RouteKernel(const float* logits, int64_t rows, int64_t experts, int top_k,
                            bool norm_topk_prob, int32_t* chosen, float* weight) {
  HYPIC_GRID_STRIDE(r, rows) {
    int32_t c[kMaxTopK];
    float w[kMaxTopK];
    RouteRow(logits + r * experts, experts, top_k, norm_topk_prob, c, w);
    // Ascending experts, so that combine sums in the CPU's order.
    for (int i = 1; i < top_k; ++i) {
      const int32_t ci = c[i];
      const float wi = w[i];
      int j = i;
      for (; j > 0 && c[j - 1] > ci; --j) {
        c[j] = c[j - 1];
        w[j] = w[j - 1];
      }
      c[j] = ci;
      w[j] = wi;
    }
    for (int j = 0; j < top_k; ++j) {
      chosen[r * top_k + j] = c[j];
      weight[r * top_k + j] = w[j];
    }
  }
}

// Block e: the rows routed to expert e, in row order, numbered 0, 1, ... (ballot and popcount
// per warp, the warps' counts in shared memory).
__global__ void __launch_bounds__(kRankThreads)
    RankKernel(const int32_t* chosen, int64_t rows, int top_k, int32_t* rank, int32_t* counts) {
  __shared__ int warp_counts[kRankThreads / 32];
  const auto e = static_cast<int32_t>(blockIdx.x);
  const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
  int running = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += kRankThreads) {
    const int64_t r = r0 + threadIdx.x;
    int slot = -1;
    for (int j = 0; r < rows && j < top_k; ++j) {
      if (chosen[r * top_k + j] == e) slot = j;
    }
    const unsigned mask = __ballot_sync(0xffffffffu, slot >= 0);
    if (lane == 0) warp_counts[warp] = __popc(mask);
    __syncthreads();
    int before = running, total = 0;
    for (int w = 0; w < kRankThreads / 32; ++w) {
      before += w < warp ? warp_counts[w] : 0;
      total += warp_counts[w];
    }
    if (slot >= 0) rank[r * top_k + slot] = before + __popc(mask & ((1u << lane) - 1u));
    running += total;
    __syncthreads();  // warp_counts is rewritten by the next chunk
  }
  if (threadIdx.x == 0) counts[e] = running;
}

// One block: the tile scan, then the pointer arrays of both GEMMs for every tile up to
// max_tiles (tiles past the ones in use get expert 0's weights and their own rows).
__global__ void __launch_bounds__(kPlanThreads)
    PlanKernel(CudaMoeArgs a, int64_t tile_rows, int64_t max_tiles, MoeBuffers b) {
  const auto experts = static_cast<int>(a.experts);
  if (threadIdx.x == 0) {
    int32_t tiles = 0;
    for (int e = 0; e < experts; ++e) {
      b.tile_start[e] = tiles;
      tiles += static_cast<int32_t>((b.counts[e] + tile_rows - 1) / tile_rows);
    }
    b.tile_start[experts] = tiles;
  }
  __syncthreads();
  const size_t x_elem = a.bf16 ? sizeof(uint16_t) : sizeof(float);
  const int64_t im = a.intermediate;
  for (int64_t t = threadIdx.x; t < max_tiles; t += blockDim.x) {
    int owner = 0;  // the last expert whose first tile is at or before t
    if (t < b.tile_start[experts]) {
      int lo = 0, hi = experts - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (b.tile_start[mid] <= t) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      owner = lo;
    }
    const int64_t row0 = t * tile_rows;
    b.a1[t] = a.gate_up[owner];
    b.b1[t] = static_cast<const char*>(b.xg) + static_cast<size_t>(row0 * a.hidden) * x_elem;
    b.c1[t] = b.gu + row0 * 2 * im;
    b.a2[t] = a.down[owner];
    b.b2[t] = a.bf16 ? static_cast<const void*>(b.h + row0 * im)
                     : static_cast<const void*>(b.gu + row0 * 2 * im);
    b.c2[t] = b.out + row0 * a.hidden;
  }
}

// The gathered row of routed pair p = (row, j): its expert's first tile, plus its rank.
__device__ __forceinline__ int64_t GatheredRow(const MoeBuffers& b, int64_t tile_rows, int64_t p) {
  return static_cast<int64_t>(b.tile_start[b.chosen[p]]) * tile_rows + b.rank[p];
}

__global__ void GatherKernel(CudaMoeArgs a, int64_t tile_rows, MoeBuffers b) {
  const int64_t hidden = a.hidden;
  HYPIC_GRID_STRIDE(i, a.rows * a.top_k * hidden) {
    const int64_t p = i / hidden, c = i % hidden;
    const float v = a.x[(p / a.top_k) * hidden + c];
    const int64_t at = GatheredRow(b, tile_rows, p) * hidden + c;
    if (a.bf16) {
      static_cast<uint16_t*>(b.xg)[at] = F32ToBf16(v);
    } else {
      static_cast<float*>(b.xg)[at] = v;
    }
  }
}

// The gate half of each gate|up row in use becomes silu(gate) * up: in place for an fp32 down
// projection, rounded to bf16 into h for a bf16 one.
__global__ void MoeSwiGluKernel(CudaMoeArgs a, int64_t tile_rows, int64_t slots, MoeBuffers b) {
  const int64_t im = a.intermediate;
  const int64_t used = static_cast<int64_t>(b.tile_start[a.experts]) * tile_rows;
  HYPIC_GRID_STRIDE(i, slots * im) {
    const int64_t row = i / im, c = i % im;
    if (row >= used) continue;
    float* g = b.gu + row * 2 * im;
    const float v = SwiGlu(g[c], g[im + c]);
    if (a.bf16) {
      b.h[row * im + c] = F32ToBf16(v);
    } else {
      g[c] = v;
    }
  }
}

__global__ void CombineKernel(CudaMoeArgs a, int64_t tile_rows, MoeBuffers b) {
  const int64_t hidden = a.hidden;
  HYPIC_GRID_STRIDE(i, a.rows * hidden) {
    const int64_t r = i / hidden, c = i % hidden;
    float acc = 0.0f;
    for (int j = 0; j < a.top_k; ++j) {
      const int64_t p = r * a.top_k + j;
      acc += b.weight[p] * b.out[GatheredRow(b, tile_rows, p) * hidden + c];
    }
    a.y[i] = acc;
  }
}

Status Launched() { return HYPIC_CUDA_STATUS(cudaGetLastError()); }

}  // namespace

CudaMoeTiling PlanCudaMoe(int64_t rows, int64_t top_k, int64_t experts) {
  const int64_t routed = rows * top_k;
  int64_t tile = 16;
  while (tile < 128 && tile * experts < routed) tile *= 2;  // tile >= mean rows per expert
  return {tile, (routed + tile - 1) / tile + (experts < routed ? experts : routed)};
}

size_t CudaMoeWorkspaceBytes(const CudaMoeArgs& a) {
  MoeBuffers b{};
  return Carve(a, PlanCudaMoe(a.rows, a.top_k, a.experts), nullptr, &b);
}

Status RunCudaMoe(const CudaMoeArgs& a, void* workspace, cublasHandle_t blas, cudaStream_t stream) {
  if (a.rows <= 0) return Status::Ok();
  const CudaMoeTiling t = PlanCudaMoe(a.rows, a.top_k, a.experts);
  MoeBuffers b{};
  Carve(a, t, static_cast<char*>(workspace), &b);
  const int64_t slots = t.max_tiles * t.tile_rows, hidden = a.hidden, im = a.intermediate;

  RouteKernel<<<Blocks(a.rows), kThreads, 0, stream>>>(a.logits, a.rows, a.experts, a.top_k,
                                                       a.norm_topk_prob, b.chosen, b.weight);
  HYPIC_RETURN_IF_ERROR(Launched());
  RankKernel<<<static_cast<unsigned>(a.experts), kRankThreads, 0, stream>>>(
      b.chosen, a.rows, a.top_k, b.rank, b.counts);
  HYPIC_RETURN_IF_ERROR(Launched());
  PlanKernel<<<1, kPlanThreads, 0, stream>>>(a, t.tile_rows, t.max_tiles, b);
  HYPIC_RETURN_IF_ERROR(Launched());
  GatherKernel<<<Blocks(a.rows * a.top_k * hidden), kThreads, 0, stream>>>(a, t.tile_rows, b);
  HYPIC_RETURN_IF_ERROR(Launched());

  // Row-major out = in w^T per tile is column-major out^T = w^T in^T: A = w (transposed).
  const cudaDataType_t in_type = a.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute =
      a.bf16 ? CUBLAS_COMPUTE_32F
             : (a.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC);
  const float one = 1.0f, zero = 0.0f;
  const auto tile = static_cast<int>(t.tile_rows), batch = static_cast<int>(t.max_tiles);
  HYPIC_RETURN_IF_ERROR(CublasStatus(
      cublasGemmBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(2 * im), tile,
                          static_cast<int>(hidden), &one, b.a1, in_type, static_cast<int>(hidden),
                          b.b1, in_type, static_cast<int>(hidden), &zero, b.c1, CUDA_R_32F,
                          static_cast<int>(2 * im), batch, compute, CUBLAS_GEMM_DEFAULT),
      "cublasGemmBatchedEx(gate_up)"));
  MoeSwiGluKernel<<<Blocks(slots * im), kThreads, 0, stream>>>(a, t.tile_rows, slots, b);
  HYPIC_RETURN_IF_ERROR(Launched());
  const auto ld_h = static_cast<int>(a.bf16 ? im : 2 * im);
  HYPIC_RETURN_IF_ERROR(CublasStatus(
      cublasGemmBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(hidden), tile,
                          static_cast<int>(im), &one, b.a2, in_type, static_cast<int>(im), b.b2,
                          in_type, ld_h, &zero, b.c2, CUDA_R_32F, static_cast<int>(hidden), batch,
                          compute, CUBLAS_GEMM_DEFAULT),
      "cublasGemmBatchedEx(down)"));
  CombineKernel<<<Blocks(a.rows * hidden), kThreads, 0, stream>>>(a, t.tile_rows, b);
  return Launched();
}

}  // namespace hypic::model

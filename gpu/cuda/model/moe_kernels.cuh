// An MoE layer's routed experts on a CUDA device with no host synchronisation
// (ForwardKernels::MoeExperts, forward_kernels.h). Every step is enqueued on one stream:
//   1. route: one thread per row runs moe_routing.h's RouteRow (the CPU's routing) on the
//      router logits, and keeps the row's experts in ascending order with their weights;
//   2. rank: one block per expert walks the rows in order and gives each row routed to it its
//      place among that expert's rows (deterministic, no atomics), and the expert's row count;
//   3. plan: one block scans the counts into each expert's first tile (a tile is tile_rows
//      rows of one expert), and writes the pointer arrays of the grouped GEMMs;
//   4. gather: each routed (row, expert) pair copies x's row to its place, rounded to bf16 when
//      the weights are bf16 (the CPU's rounding of a GEMM's input);
//   5. gate_up for every tile, SwiGLU (its output rounded to bf16 for a bf16 down projection),
//      down for every tile: cublasGemmBatchedEx over the tiles;
//   6. combine: y[r] = sum over r's experts in ascending order of w * out (the CPU's order).
//
// The grouped GEMM. cuBLAS's grouped entry point (cublasGemmGroupedBatchedEx) takes the groups'
// sizes in host memory, which would need the counts on the host: a synchronisation per layer.
// Instead each expert's rows are padded to whole tiles, and one batched GEMM (pointer arrays
// filled on the device) runs a bound on the tile count that the host knows from the row count
// alone: sum_e ceil(c_e / tile) <= ceil(rows * top_k / tile) + min(experts, rows * top_k).
// Tiles past the real ones compute garbage into their own rows, never read; the waste is at
// most one tile per expert twice over. tile_rows follows the mean rows per expert (16 to 128),
// so a decode step pays 16-row tiles and a long prefill 128-row ones.
//
// Workspace: CudaMoeWorkspaceBytes(args) of device memory, the caller's (garbage on entry).
// Thread-compatible; everything runs on the caller's current device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace hypic::model {

struct CudaMoeArgs {
  const float* x = nullptr;       // [rows, hidden]
  const float* logits = nullptr;  // [rows, experts]
  float* y = nullptr;             // [rows, hidden], overwritten
  int64_t rows = 0, hidden = 0, experts = 0, intermediate = 0;
  int top_k = 0;  // REQUIRES: 1 <= top_k <= min(experts, kMaxTopK)
  bool norm_topk_prob = true;
  bool bf16 = false;                     // bf16 weights (and GEMM inputs), else fp32
  bool allow_tf32 = false;               // fp32 weights: TF32 tensor-core products
  const void* const* gate_up = nullptr;  // device array [experts] of device weight pointers
  const void* const* down = nullptr;     // likewise
};

// The tiling of a layer, from the host's row count.
struct CudaMoeTiling {
  int64_t tile_rows = 0;
  int64_t max_tiles = 0;
};
CudaMoeTiling PlanCudaMoe(int64_t rows, int64_t top_k, int64_t experts);

size_t CudaMoeWorkspaceBytes(const CudaMoeArgs& args);

// Enqueues the whole layer on `stream` (blas must be bound to it). Errors: a launch or cuBLAS
// failure (kDeviceError).
Status RunCudaMoe(const CudaMoeArgs& args, void* workspace, cublasHandle_t blas,
                  cudaStream_t stream);

}  // namespace hypic::model

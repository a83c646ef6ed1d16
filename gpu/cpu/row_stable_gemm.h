// RowStableGemm: an fp32 GEMM whose every element of C is one FMA chain over k, in order, so
// a row's bits depend neither on how many rows or columns its call has nor on the thread
// count. gemm.h routes its fp32 products here on CPUs where oneDNN's kernels lack that
// property: without AVX-512, oneDNN 2.6 runs fp32 on its AVX2 `gemm:jit`, which switches
// between copy and no-copy kernels (and partitions k over threads) by shape, and a row then
// sums in a different order in a one-row call (a decode step, a last-row lm_head) than in a
// prefill. The model's exactness checks rely on it (a compose's live rows are a subset of a
// prefill's rows).
//
// Blocked for the caches (row blocks of 48, k chunks of 256, A packed in tiles of 6 rows, B in
// panels of 16 columns) and written with 8-wide vectors: AVX2 + FMA where the build targets them,
// plain vector code elsewhere; where it targets AVX-512 a tile covers two panels in 16-lane
// vectors (the same chains, so the same bits; 1.1-1.5x on the Xeon). Threads: the calling thread's
// ComputeThreads() (ParallelFor, rows or panels). Thread-safe (per-thread buffers).
#pragma once

#include <cstdint>

#include "gpu/cpu/gemm.h"

namespace hypic::cpu {

// C = alpha op(A) op(B) + beta C, fp32, row-major (gemm.h's layout); beta == 0 ignores C's
// previous contents (NaN included).
void RowStableGemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The same for bf16 operands (bit patterns), widened exactly to fp32 as they are packed (both
// are packed on every call anyway, so the widening costs no extra pass), with fp32 products
// and sums: the bf16 product on CPUs without bf16 instructions, with the bits of the fp32 call
// on the widened values.
void RowStableGemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha,
                   const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                   float* c, int64_t ldc);

// The width of RowStableGemm's panels of B (two 8-wide vectors): a packed operand's column
// offsets into them are multiples of it.
inline constexpr int64_t kRowStablePanel = 16;

// A bf16 weight W [n, k] (nn.Linear's layout) kept in the panels RowStableGemm packs B into,
// in bf16: ceil(n / 16) panels of [k][16], zero past row n of W, so a product reads the weight
// as it is (a depth block at a time, widened in the cache) instead of packing it per call.
int64_t RowStablePanelElements(int64_t n, int64_t k);
void PackRowStablePanels(const uint16_t* w, int64_t n, int64_t k, uint16_t* panels);
void UnpackRowStablePanels(const uint16_t* panels, int64_t n, int64_t k, uint16_t* w);
// C = alpha A W^T + beta C for A [m, k] bf16 (row stride lda) and W in panels: the bits of
// RowStableGemm(kNo, kYes, ...) on the plain W.
void RowStableGemmPanels(int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                         int64_t lda, const uint16_t* panels, float beta, float* c, int64_t ldc);
// The same for fp32 A, each element rounded to bf16 (F32ToBf16) as A is packed: the bits of
// RowStableGemmPanels on the rounded A, without a pass that writes it.
void RowStableGemmPanelsRoundingA(int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                                  int64_t lda, const uint16_t* panels, float beta, float* c,
                                  int64_t ldc);

// An fp32 op(B) [k, n] in the same panels, for a caller's own kernels over them (the fused
// fp32 attention's K^T and V, gpu/model/cpu_attention.cpp): ceil(n / 16) panels of [k][16]
// (RowStablePanelElements(n, k) floats), panels[(p * k + kk) * 16 + j] = op(B)[kk][16 p + j],
// zero past column n.
void PackRowStablePanelsF32(Trans tb, int64_t n, int64_t k, const float* b, int64_t ldb,
                            float* panels);

}  // namespace hypic::cpu

// A bf16 product on AMX tiles, C = A W^T, against a weight in the blocked layout oneDNN packs
// it into for its AMX kernels, read in place (PackedBf16Weight's data: gemm.h).
//
// Why: a compose's or a decode step's products have a few dozen rows against weights that are
// not in cache (an expert's ~40 rows, 1 MiB of weight). oneDNN's kernel leaves the weight's
// stream to the hardware prefetchers (7 GB/s a thread on a Xeon where the core streams 13) and
// pays a primitive call's fixed cost; this one prefetches the next 64 columns' block into L2
// while it multiplies the current one: 1.2-1.4x on such products, the same on cached ones. A
// prefill's products of thousands of rows run as panels of rows, each thread its own, against
// a weight that stays in the thread's L2: 1.1-1.35x oneDNN's (docs/architecture.md).
//
// Exactness: each C element is one chain of tdpbf16ps over k's blocks of 32 in order, from
// zero, whatever m. oneDNN's brgemm computes the same for dense A and C rows at k <= 512 and
// for its calls of up to a few hundred rows at any k; its bigger calls sum k >= 1,024 in
// another order (a row's bits then hung on its call's size). So a row's result depends only
// on the row (tests/gpu/cpu/gemm_test.cpp). With a wider row stride oneDNN sums in yet another
// order, so the packed Gemm sends only dense products here.
//
// Threads: the calling thread's ComputeThreads(), over blocks of 64 columns (few rows) or over
// panels of rows (many). Thread-safe.
#pragma once

#include <cstdint>

namespace hypic::cpu {

// oneDNN's BA16a64b2a for W^T [k, n]: blocks of 32 k (16 pairs) by 64 columns, each
// [16 pairs][64 columns][2], zero past k and n.
struct AmxBlockedWeight {
  const uint16_t* data;
  int64_t n, k;
  int64_t k_block_stride;  // elements from one block of 32 k to the next
  int64_t n_block_stride;  // elements from one block of 64 columns to the next
};

// Products of at most this many rows split their columns over the threads; bigger ones split
// their rows, in panels of this many. Up to it the column split was as fast as oneDNN with the
// weight in cache and 1.1-1.4x faster without (k 512, n 512-1024, one thread, Xeon family 6
// model 167); from 512 rows it was slower (A no longer stays in cache), where panels of 256
// rows (A 256 KiB at k 512) were the fastest of 32-512 or near it at k 512-2048 (at k 4096 one
// shape of two ran faster on 128).
inline constexpr int64_t kAmxPanelRows = 256;

// The shapes this kernel takes: k a multiple of 32 (else oneDNN runs the product), any n: the
// columns of a last partial tile go through a buffer. oneDNN's product with a partial column
// tile (n 8 probed) sums a call of 1-16 rows in another order than a bigger call, so a GDN
// in_proj whose 2 x value_heads gate columns leave n off a multiple of 16 would lose a row's
// bits there.
bool AmxGemmTakes(int64_t n, int64_t k);

// C [m, n] (row stride ldc) = A [m, k] (bf16, row stride lda) W^T, fp32 (REQUIRES:
// AmxUsable(), AmxGemmTakes(w.n, w.k), m a positive multiple of 16).
void AmxGemmRows(int64_t m, const uint16_t* a, int64_t lda, const AmxBlockedWeight& w, float* c,
                 int64_t ldc);

// Products run by AmxGemmRows so far, in this process (for tests).
uint64_t AmxGemmCalls();

}  // namespace hypic::cpu

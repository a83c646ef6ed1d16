// Causal GQA softmax attention on the CPU, flash-style: per (head, query tile) the keys go by in
// blocks with an online softmax (running max and sum per row, the output accumulated
// unnormalised and rescaled when the max grows), so a block's scores stay in cache however long
// the context. Two precisions for the two products QK^T and PV:
//   - fp32 (AttentionShape::bf16_products false): dnnl_sgemm per block where oneDNN runs the
//     fp32 products (AVX-512); elsewhere one fused kernel with RowStableGemm's sums (a group of
//     6 query rows' scores stay in L1 from Q K^T through the softmax to P V: 1.8x the GEMM
//     version on an AVX2 EPYC). The f32 path, held to the float64 reference's tolerances.
//   - bf16 (true, the bf16-weights path): one fused kernel on AVX512-BF16 dot products
//     (vdpbf16ps), or on AMX tiles (tdpbf16ps, the same pairwise bf16 products, 16 query
//     rows per step) where the CPU has AMX-BF16 and head_dim is a multiple of 64: 1.6x the
//     16k prefill on a Xeon. Q (already scaled by 1/sqrt(head_dim)), K, V and the block's
//     probabilities are rounded to bf16, round-to-nearest-even; products accumulate in fp32;
//     the softmax (max, exp, sum, rescale) and the output are fp32. K and V are packed once
//     per call into the kernel's layouts, so calls with few query rows (a decode step) keep
//     the fp32 products: kBf16AttentionMinRows.
// Either way a row's output depends only on its position and on K/V, never on which other
// rows share the call, and not on the thread count: a compose's seam row equals the same row
// of a full prefill bit for bit, given the same K/V.
//
// Buffers are fp32, row-major, caller-owned. Threads: one ParallelFor over (head, tile) items on
// the calling thread's compute budget (gpu/cpu/compute_threads.h). Thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_vector.h"
#include "gpu/model/forward_kernels.h"

namespace hypic::model {

// Fewer query rows than this take the fp32 products even when bf16 ones are asked for.
inline constexpr int64_t kBf16AttentionMinRows = 16;

// True when this build has the fused bf16 kernel (compiled for AVX512-BF16), the head size
// suits it (a multiple of 16, at most 512) and oneDNN's ISA cap (ONEDNN_MAX_CPU_ISA), if set,
// allows bf16 instructions; otherwise bf16_products falls back to fp32.
bool HasBf16Attention(int64_t head_dim);

// The kernel CausalAttention runs for this head size and precision, for logs and benchmark
// headers: "amx-bf16" (tile products), "avx512-bf16" (vdpbf16ps) or "fp32" (bf16 products
// asked for but not available here become "fp32"). Calls with fewer than
// kBf16AttentionMinRows rows take fp32 whatever this says.
const char* AttentionKernelName(int64_t head_dim, bool bf16_products);

// One query row per entry of `positions` (non-decreasing): row r attends keys and values at
// positions [0, positions[r]]. q/out: [rows, heads, head_dim] (q unscaled); k/v: [positions,
// kv_heads, head_dim]. Scores are scaled by 1/sqrt(head_dim). *pack_buffer holds the bf16
// products' packed K and V (grown as needed, kept by the caller for its next call: 2 bytes
// per element of k and v).
void CausalAttention(const AttentionShape& shape, const float* q, const float* k, const float* v,
                     float* out, std::span<const int64_t> positions,
                     AlignedVector<uint32_t>* pack_buffer);

// The same with K/V as spans covering positions [0, positions.back()] in order
// (ForwardKernels::AttentionSpans), each read in place, a `rope` span's K rotated (ApplyRope's
// rotation) as it is read: the bf16 products pack straight from the spans; the fp32 ones first
// gather them into *contiguous (2 x positions x kv_heads x head_dim floats, kept by the
// caller). The same bits as CausalAttention over caches holding the rotated rows.
void CausalAttention(const AttentionShape& shape, const KvRope& rope, const float* q,
                     std::span<const KvSpan> kv, float* out, std::span<const int64_t> positions,
                     AlignedVector<uint32_t>* pack_buffer, std::vector<float>* contiguous);

}  // namespace hypic::model

// The one GEMM interface of the CPU runtime: every matrix product of the model pass, the
// linear-attention chunked form and the composition algebra goes through here, on oneDNN
// (Debian's libdnnl, which picks its kernels from CPUID features at run time: AMX-BF16 on
// Sapphire/Emerald Rapids, AVX512-BF16 on Zen 4/5 and Cooper Lake, AVX-512 or AVX2 elsewhere).
//
// Gemm builds a oneDNN matmul primitive per shape (small fp32 products, kGemmSmallDim, go to
// dnnl_sgemm instead) and keeps it in a process-wide LRU cache, so
// a shape pays its set-up (about 0.2-0.4 ms of JIT) once. Rows are split into blocks of at
// most kGemmRowBlock, then a multiple of 16, then a tail of fewer than 16, so the shapes a
// weight sees stay few however the row count varies from call to call; where copying them is
// cheaper than reading B again, the last two go as one call padded to a multiple of 16 (a
// row's bits are the same either way). On AMX machines a packed bf16 weight's dense products
// run on hypic's own tile kernel instead (amx_gemm.h), row-stable at any shape. GemmAnyShape is
// for products whose inner dimensions change with every call (attention over a growing
// context): oneDNN's dnnl_sgemm, which has no per-shape set-up. On CPUs without AVX-512, where
// oneDNN's fp32 kernels give a row different bits in calls of different shapes, every fp32
// product runs on RowStableGemm instead (row_stable_gemm.h); on CPUs without bf16 instructions
// (no AVX512-BF16 or AMX-BF16) bf16 products widen to fp32 there (oneDNN 2.6 has no bf16
// matmul below AVX-512, and only a slower emulation that is not row-stable on avx512_core):
// GemmInfo says which.
//
// Layout: row-major, as cblas_sgemm with CblasRowMajor: op(A) is [m, k], op(B) is [k, n], C is
// [m, n]; a transposed operand is stored as the transpose (B = W^T for an nn.Linear weight W
// [n, k] is tb = kYes with ldb = k). bf16 operands are raw bits (core/dtype.h's F32ToBf16);
// accumulation and C are fp32.
//
// Threads: each call uses the calling thread's ComputeThreads() (compute_threads.h), through
// OpenMP, which oneDNN honours per calling thread. A primitive is built for its thread count.
//
// Errors: oneDNN fails only on arguments no caller of ours passes (negative sizes, strides
// below the row width) or on allocation failure; either is a bug or an out-of-memory, and
// aborts with oneDNN's message, as an allocation failure would. Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/aligned_vector.h"
#include "gpu/cpu/amx_gemm.h"

namespace hypic::cpu {

enum class Trans : uint8_t { kNo = 0, kYes = 1 };

// Rows per primitive call. Each call pays a fixed cost per weight (oneDNN's set-up and, for a
// plain-layout weight, its copy into the blocked layout, which PackedBf16Weight avoids), so
// longer blocks pay it less often: 2,048 against 512 rows took a 16k prefill of builtin:small
// from 4.13 to 3.93 s on a Xeon (2 threads, plain weights, A/B in one session).
inline constexpr int64_t kGemmRowBlock = 2048;
// fp32 products with n and k both at most this (the chunked linear-attention's, whose fused
// [S | T] products are dv + dk wide: 256 at dk = dv = 128) go to dnnl_sgemm: there a
// primitive's per-call cost (memory objects, argument map) outweighs its faster kernel (64^3:
// 2.9 us against 3.9; at dk 128 the operator with T_C 12% faster than with the limit at 128;
// docs/benchmarks-history.md). The choice does not depend on m, so a row's result does not
// depend on how many rows a call has (the primitives' row blocks give the same bits per row: a
// last-row-only lm_head equals the all-rows one; an sgemm call of fewer than 16 rows, which
// oneDNN sums in another order, goes as 16).
inline constexpr int64_t kGemmSmallDim = 256;

// C = alpha op(A) op(B) + beta C, fp32.
void Gemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// C = alpha op(A) op(B) + beta C, bf16 A and B, fp32 accumulation and C. On a CPU without bf16
// instructions (no AVX512-BF16 or AMX-BF16), RowStableGemm widens both operands to fp32, which
// is exact, as it packs them (GemmInfo::bf16_native says which).
void Gemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
          int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

// A bf16 GEMM weight W [n, k] (nn.Linear's row-major layout) reordered once into the blocked
// layout that oneDNN's matmul reads directly. With a plain-layout B oneDNN copies B into that
// layout on every call, once per row block: 5% of a 16k-token prefill on an AMX machine, and
// most of a decode step's product. The packed layout pads n and k to its blocks. Immutable
// once made; thread-safe. On a CPU without bf16 instructions it keeps RowStableGemm's bf16
// panels instead (layout() is null; row_stable_gemm.h), which that product reads in place.
class PackedBf16Weight {
 public:
  // Packs w, raw bf16 bits, row-major [n, k] (REQUIRES: n, k > 0).
  PackedBf16Weight(const uint16_t* w, int64_t n, int64_t k);
  ~PackedBf16Weight();
  PackedBf16Weight(const PackedBf16Weight&) = delete;
  PackedBf16Weight& operator=(const PackedBf16Weight&) = delete;

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  size_t bytes() const { return bytes_; }  // resident, with the layout's padding
  // Writes W back in its plain layout, row-major [n, k] (for a device that uploads it).
  void Unpack(uint16_t* w) const;
  // The blocked layout (a dnnl_memory_desc_t of this (n, k), shared by every weight of it), or
  // null for RowStableGemm's panels.
  const void* layout() const { return layout_; }
  const void* data() const { return data_; }
  // The weight as AmxGemmRows reads it, or nothing where that kernel does not run (no AMX,
  // another layout, a shape it does not take).
  std::optional<AmxBlockedWeight> amx_blocked() const {
    if (amx_n_stride_ == 0) return std::nullopt;
    return AmxBlockedWeight{static_cast<const uint16_t*>(data_), n_, k_, amx_k_stride_,
                            amx_n_stride_};
  }

 private:
  int64_t n_, k_;
  size_t bytes_;
  const void* layout_;
  void* data_;
  int64_t amx_k_stride_ = 0, amx_n_stride_ = 0;  // the AMX layout's block strides; 0: none
};

// C = alpha A W^T + beta C for A [m, k] bf16 (row stride lda) and a packed W [n, k], fp32
// accumulation and C. Products with alpha 1, beta 0 and dense rows (lda == k, ldc == n) run on
// AmxGemmRows where the weight allows (amx_blocked()), whatever m: a row's bits do not depend
// on m (tests/gpu/cpu/gemm_test.cpp). The rest run on oneDNN (its kernels sum in another order
// when a stride is wider), with the bits of the plain-layout bf16 Gemm with tb = kYes; there a
// row's bits hold across m for k <= 512 only (on a Xeon, oneDNN's 2,048-row calls sum k >= 1,024
// in another order than its calls of a few hundred rows).
void Gemm(int64_t m, float alpha, const uint16_t* a, int64_t lda, const PackedBf16Weight& w,
          float beta, float* c, int64_t ldc);
// The same product on oneDNN whatever AmxGemmRows would take (RowStableGemm's panels on a CPU
// without bf16 instructions, where they beat oneDNN's emulation 3x): the peak benchmarks
// quote, measured with the library rather than with the runtime's own AMX kernel.
void OneDnnGemm(int64_t m, float alpha, const uint16_t* a, int64_t lda, const PackedBf16Weight& w,
                float beta, float* c, int64_t ldc);
// The same as Gemm for fp32 A [m, k], rounded to bf16 (F32ToBf16, as ConvertRowsToBf16) first: the
// model's projections of fp32 activations. The rounded rows go to *a_bf16 (grown as needed;
// on cache lines, as AMX loads them) where oneDNN reads them; RowStableGemm rounds them as it packs
// A, with no pass of its own.
void GemmRoundingA(int64_t m, float alpha, const float* a, int64_t lda, const PackedBf16Weight& w,
                   float beta, float* c, int64_t ldc, AlignedVector<uint16_t>* a_bf16);

// C = alpha op(A) op(B) + beta C, fp32, for shapes that differ call to call.
void GemmAnyShape(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Rows (or an inner dimension) below which GemmFewRows beats a library call.
inline constexpr int64_t kGemmFewRows = 16;

// C = alpha op(A) op(B) + beta C, fp32, on the calling thread, for small products (m or k below
// kGemmFewRows: a chunk's tail, a compose's seam steps in the chunked linear-attention form):
// per row, one pass over k into accumulators vectorised over n, with no library call, whose
// fixed cost (dnnl_sgemm's 1-2 us, and its 16-row padding here) exceeds what such a product
// takes. Each row's sums run in one order whatever m, but that is not Gemm's order: a caller
// that needs a row's bits equal to those of a bigger call uses GemmAnyShape.
void GemmFewRows(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// oneDNN's fp32 sgemm whatever the CPU: the fastest fp32 GEMM on the machine, for the peaks
// benchmarks quote (where the runtime's fp32 products run on RowStableGemm, they are measured
// against this).
void OneDnnSgemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// dst[r, j] = bf16(src[r, j]) for rows x cols, round to nearest even (vcvtneps2bf16 when the
// build targets AVX512-BF16; the same bits as F32ToBf16 for every normal value; the instruction
// flushes denormal inputs to zero).
void ConvertRowsToBf16(const float* src, int64_t lds, int64_t rows, int64_t cols, uint16_t* dst,
                       int64_t ldd);

// What oneDNN runs on this machine, for logs and benchmark headers.
struct GemmInfo {
  std::string library;       // "onednn 2.6.3"
  std::string f32_kernel;    // oneDNN's implementation name for an fp32 2048^3 product
  std::string bf16_kernel;   // ... and for bf16 x bf16 -> fp32
  std::string cpu_isa;       // the most capable ISA oneDNN detected ("avx512_core_amx", ...)
  bool f32_onednn = false;   // fp32 products run on oneDNN (else on RowStableGemm)
  bool bf16_native = false;  // bf16 products run on oneDNN (else widened to fp32, RowStableGemm)
  bool bf16_packed_amx = false;  // dense packed-weight products run on AmxGemmRows
};
const GemmInfo& DescribeGemm();
// One line: "onednn 2.6.3, f32 brg:avx512_core, bf16 brg:avx512_core_bf16 (isa avx512_core_bf16)",
// with ", bf16 packed: hypic amx" where AmxGemmRows runs the packed-weight products.
std::string GemmSummary();

// Primitives built and cache hits so far (for tests and metrics).
struct GemmCacheStats {
  uint64_t built = 0;
  uint64_t hits = 0;
  uint64_t size = 0;
};
GemmCacheStats GemmCacheCounters();

}  // namespace hypic::cpu

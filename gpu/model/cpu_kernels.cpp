#include "gpu/model/cpu_kernels.h"

#include <fmt/format.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "gpu/cpu/compute_threads.h"
#include "gpu/cpu/gemm.h"
#include "gpu/linear/linear_attention.h"
#include "gpu/linear/linear_math.h"
#include "gpu/linear/short_conv.h"
#include "gpu/model/cpu_attention.h"

namespace hypic::model {
namespace {

// dst [rows, cols] = bf16(x) (row stride ldx), rows split over the compute threads.
void RoundRows(const float* x, int64_t ldx, int64_t rows, int64_t cols, uint16_t* dst) {
  cpu::ParallelFor(rows, 64, [&](int64_t r0, int64_t r1) {
    cpu::ConvertRowsToBf16(x + r0 * ldx, ldx, r1 - r0, cols, dst + r0 * cols, cols);
  });
}

// y[c] += scale * s[c]: an expert's output row into the MoE's sum (one expression for both of
// RoutedExperts' ways, so both round alike).
void AddScaledRow(float* y, float scale, const float* s, int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] += scale * s[c];
}

// y[m, n] = x[m, k] * w[n, k]^T (+ y): fp32, or with bf16 weights (plain or packed) x rounded
// to bf16 and an fp32-accumulating bf16 GEMM. The rounding is `a16` where given (row stride
// k), else made here (into *x16 where the GEMM reads it so).
void LinearGemm(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const uint16_t* a16,
                DeviceWeight w, int64_t ldw, float* y, int64_t ldy, bool accumulate,
                AlignedVector<uint16_t>* x16) {
  const float beta = accumulate ? 1.0f : 0.0f;
  if (w.dtype != DType::kBF16) {
    cpu::Gemm(cpu::Trans::kNo, cpu::Trans::kYes, m, n, k, 1.0f, x, ldx,
              static_cast<const float*>(w.data), ldw, beta, y, ldy);
    return;
  }
  if (w.packed != nullptr) {
    // A packed weight is always used whole: [n, k] with ldw == k (forward.cpp's projections).
    assert(w.packed->n() == n && w.packed->k() == k && ldw == k);
    if (a16 != nullptr) {
      cpu::Gemm(m, 1.0f, a16, k, *w.packed, beta, y, ldy);
    } else {
      cpu::GemmRoundingA(m, 1.0f, x, ldx, *w.packed, beta, y, ldy, x16);
    }
    return;
  }
  if (a16 == nullptr) {
    if (x16->size() < static_cast<size_t>(m * k)) x16->resize(static_cast<size_t>(m * k));
    RoundRows(x, ldx, m, k, x16->data());
    a16 = x16->data();
  }
  cpu::Gemm(cpu::Trans::kNo, cpu::Trans::kYes, m, n, k, 1.0f, a16, k,
            static_cast<const uint16_t*>(w.data), ldw, beta, y, ldy);
}

}  // namespace

#if defined(__AVX512F__) && defined(__AVX512BF16__)
namespace {
// GCC 12's AVX-512 headers pass _mm512_undefined_ps() as the unused operand of the unmasked
// forms, which -Wmaybe-uninitialized reports once inlined (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// SwiGlu(g, u) of 16 lanes: FastExp and Silu (linear_math.h) operation for operation, with the
// fused multiply-adds the compiler makes of the scalar form.
__m512 SwiGlu16(__m512 g, __m512 u) {
  __m512 x = _mm512_sub_ps(_mm512_setzero_ps(), g);
  x = _mm512_max_ps(_mm512_set1_ps(-87.3f), x);  // x < -87.3 ? -87.3 : x, NaN passing
  x = _mm512_min_ps(_mm512_set1_ps(88.3f), x);   // 88.3 < x ? 88.3 : x
  const __m512 round = _mm512_set1_ps(12582912.0f);
  const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504f), round);
  const __m512 n = _mm512_sub_ps(t, round);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i bits =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_castps_si512(t),
                                         _mm512_set1_epi32(static_cast<int>(127u - 0x4B400000u))),
                        23);
  const __m512 e = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
  const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  return _mm512_mul_ps(silu, u);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
}  // namespace
#endif

void SwiGluRowToBf16(const float* gu, int64_t im, uint16_t* h) {
  int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512BF16__)
  for (; i + 16 <= im; i += 16) {
    const __m512 v = SwiGlu16(_mm512_loadu_ps(gu + i), _mm512_loadu_ps(gu + im + i));
    const __m256bh packed = _mm512_cvtneps_pbh(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(h + i),
                        reinterpret_cast<const __m256i&>(packed));
  }
#endif
  for (; i < im; ++i) h[i] = F32ToBf16(SwiGlu(gu[i], gu[im + i]));
}

void RmsNormZeroCentred(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                        int64_t rows, int64_t dim, float eps) {
  cpu::ParallelFor(rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) RmsNormZeroCentredRow(x + r * ldx, w, y + r * ldy, dim, eps);
  });
}

namespace {

// RoPE's (cos, sin) by position, [positions, 2 * half] (the cos half, then the sin half), the
// floats RopeCosSin gives, kept per (theta, rotary_dim) and grown as longer prompts come: every
// compose rotates all of its cached keys again (16k positions x 8 frequencies of double
// sin/cos per attention layer, ~7% of a warm compose, otherwise). Positions from
// kRopeTablePositions up are computed as before. Thread-safe: a reader keeps its snapshot.
constexpr int64_t kRopeTablePositions = int64_t{1} << 17;

struct RopeTable {
  double theta = 0;
  int64_t rotary_dim = 0;
  int64_t positions = 0;
  std::shared_ptr<const std::vector<float>> cs;
};

void FillRopeRows(double theta, int64_t rotary_dim, int64_t pos0, int64_t rows, float* cs) {
  const int64_t half = rotary_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<size_t>(i)] = RopeInvFreq(theta, i, rotary_dim);
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* row = cs + r * 2 * half;
    for (int64_t i = 0; i < half; ++i) {
      RopeCosSin(pos0 + r, inv_freq[static_cast<size_t>(i)], &row[i], &row[half + i]);
    }
  }
}

RopeTable SharedRopeTable(double theta, int64_t rotary_dim, int64_t positions) {
  static std::mutex mu;
  static std::vector<RopeTable> tables;  // one per (theta, rotary_dim) seen
  positions = std::min(positions, kRopeTablePositions);
  {
    std::lock_guard lock(mu);
    for (const RopeTable& t : tables) {
      if (t.theta == theta && t.rotary_dim == rotary_dim && t.positions >= positions) return t;
    }
  }
  RopeTable t{theta, rotary_dim, std::min(kRopeTablePositions, (positions + 4095) / 4096 * 4096),
              nullptr};
  auto cs = std::make_shared<std::vector<float>>(static_cast<size_t>(t.positions * rotary_dim));
  cpu::ParallelFor(t.positions, 512, [&](int64_t r0, int64_t r1) {
    FillRopeRows(theta, rotary_dim, r0, r1 - r0, cs->data() + r0 * rotary_dim);
  });
  t.cs = std::move(cs);
  std::lock_guard lock(mu);
  for (RopeTable& old : tables) {
    if (old.theta == theta && old.rotary_dim == rotary_dim) {
      if (old.positions < t.positions) old = t;
      return old;
    }
  }
  tables.push_back(t);
  return t;
}

// The (cos, sin) row RopeRows rotates position `pos` by: the table's, or past it computed
// into *computed as RopeCosSin gives them.
const float* RopeCsRow(const RopeTable& table, double theta, int64_t rotary_dim, int64_t pos,
                       std::vector<float>* computed) {
  const int64_t width = rotary_dim / 2 * 2;  // FillRopeRows' row: cos, then sin, of each pair
  if (pos < table.positions) return table.cs->data() + pos * width;
  computed->resize(static_cast<size_t>(width));
  FillRopeRows(theta, rotary_dim, pos, 1, computed->data());
  return computed->data();
}

// One head's NeoX pairs (i, i + half), i < half, rotated from `in` into `out` (which may be
// `in`) by the (cos, sin) row cs: every rotated value RopeRows and RopeRowsToBf16 make, so a
// compose's K rotated as the attention packs it keeps the bits of a full prefill's K rotated
// in its cache. linear::RotatePair's arithmetic with its contraction written out: a' = a c -
// (b s), b' = b c + (a s), each an fma over the other product rounded: the same bits in every
// caller, whatever the compiler would contract where it inlines.
inline void RotateHead(const float* in, float* out, const float* cs, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {  // vectorised: fma is exact, so lanes change no bits
    const float a = in[i], b = in[i + half], c = cs[i], s = cs[half + i];
    out[i] = std::fma(a, c, -(b * s));
    out[i + half] = std::fma(b, c, a * s);
  }
}

}  // namespace

void RopeRows(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows, int64_t heads,
              int64_t head_dim, int64_t rotary_dim, double theta, int64_t pos0) {
  const int64_t half = rotary_dim / 2;
  if (rows <= 0 || (half == 0 && src == dst)) return;
  if (half == 0) {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * lds, heads * head_dim, dst + r * ldd);
    return;
  }
  const RopeTable table = SharedRopeTable(theta, rotary_dim, pos0 + rows);
  cpu::ParallelFor(rows, 256, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> computed;  // a row past the table (no allocation per call)
    for (int64_t r = r0; r < r1; ++r) {
      const float* cs = RopeCsRow(table, theta, rotary_dim, pos0 + r, &computed);
      for (int64_t h = 0; h < heads; ++h) {
        const float* in = src + r * lds + h * head_dim;
        float* out = dst + r * ldd + h * head_dim;
        RotateHead(in, out, cs, half);
        if (out != in) std::copy(in + 2 * half, in + head_dim, out + 2 * half);
      }
    }
  });
}

void RopeRowsToBf16(const float* src, int64_t lds, uint16_t* dst, int64_t ldd, int64_t rows,
                    int64_t head_dim, int64_t rotary_dim, double theta, int64_t pos0) {
  const int64_t half = rotary_dim / 2, rotated = 2 * half;
  if (rows <= 0) return;
  if (half == 0) {
    cpu::ConvertRowsToBf16(src, lds, rows, head_dim, dst, ldd);
    return;
  }
  const RopeTable table = SharedRopeTable(theta, rotary_dim, pos0 + rows);
  thread_local std::vector<float> computed;  // a row past the table (kept between calls)
  const bool split = rotated % 16 == 0;
#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512VL__)
  // Row by row in registers where the rotated dims fill whole vectors: RotateHead's arithmetic
  // and ConvertRowsToBf16's roundings (the instruction on its 16-lane chunks of the rest, the
  // scalar rounding on their tail), so the same bits as the two passes below, without the fp32
  // block between them (the two passes were most of a compose's K/V packing).
  if (split) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const int64_t rest = head_dim - rotated, rest16 = rest / 16 * 16;
    for (int64_t r = 0; r < rows; ++r) {
      const float* in = src + r * lds;
      const float* cs = RopeCsRow(table, theta, rotary_dim, pos0 + r, &computed);
      uint16_t* out = dst + r * ldd;
      for (int64_t i = 0; i < half; i += 8) {
        const __m256 a = _mm256_loadu_ps(in + i), b = _mm256_loadu_ps(in + half + i);
        const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(cs + half + i);
        // a c - (b s) and b c + (a s), each product rounded before the fma, as RotateHead.
        const __m256 lo = _mm256_fmadd_ps(a, c, _mm256_xor_ps(_mm256_mul_ps(b, s), sign));
        const __m256 hi = _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s));
        const __m128bh lo16 = _mm256_cvtneps_pbh(lo), hi16 = _mm256_cvtneps_pbh(hi);
        std::memcpy(out + i, &lo16, sizeof(lo16));
        std::memcpy(out + half + i, &hi16, sizeof(hi16));
      }
      for (int64_t d = rotated; d < rotated + rest16; d += 16) {
        const __m256bh x16 = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + d));
        std::memcpy(out + d, &x16, sizeof(x16));
      }
      for (int64_t d = rotated + rest16; d < head_dim; ++d) out[d] = F32ToBf16(in[d]);
    }
    return;
  }
#endif
  // Every row's rotated dims into `block` first, then two roundings of all the rows (two calls
  // per row cost more than the rounding). The rotated dims go alone, or, when they end inside
  // one of ConvertRowsToBf16's 16-lane vectors (which would round the row's two parts by
  // different instructions), with the rest of the row.
  const int64_t width = split ? rotated : head_dim;
  thread_local std::vector<float> block;  // kept: a compose calls this per K block
  block.resize(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = src + r * lds;
    float* row = block.data() + r * width;
    RotateHead(in, row, RopeCsRow(table, theta, rotary_dim, pos0 + r, &computed), half);
    if (!split) std::copy(in + rotated, in + head_dim, row + rotated);
  }
  cpu::ConvertRowsToBf16(block.data(), width, rows, width, dst, ldd);
  if (split) {
    cpu::ConvertRowsToBf16(src + rotated, lds, rows, head_dim - rotated, dst + rotated, ldd);
  }
}

void ApplyRope(float* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_dim,
               int64_t rotary_dim, double theta, int64_t pos0) {
  RopeRows(x, ld, x, ld, rows, heads, head_dim, rotary_dim, theta, pos0);
}

CpuForwardKernels::ScratchSet& CpuForwardKernels::ThreadScratch() {
  thread_local ScratchSet set;
  return set;
}

// Takes the thread's buffers (a pass nested in another on the same thread finds none and
// grows its own) and gives them back when done, unless they grew past kKeptScratchBytes (a
// one-off long prompt does not pin its buffers to the thread).
CpuForwardKernels::CpuForwardKernels() : scratch_(std::exchange(ThreadScratch(), {})) {}

CpuForwardKernels::~CpuForwardKernels() {
  constexpr size_t kKeptScratchBytes = size_t{2048} << 20;
  ScratchSet& kept = ThreadScratch();
  if (kept.slots.empty() && scratch_.Bytes() <= kKeptScratchBytes) kept = std::move(scratch_);
}

size_t CpuForwardKernels::ThreadScratchBytes() { return ThreadScratch().Bytes(); }

size_t CpuForwardKernels::ScratchSet::Bytes() const {
  size_t bytes = (x_bf16.capacity() + rows_bf16.capacity()) * sizeof(uint16_t) +
                 kv_pack.capacity() * sizeof(uint32_t) + kv_gather.capacity() * sizeof(float) +
                 static_cast<size_t>(expert_out.capacity) * sizeof(float);
  for (const Buffer& b : slots) bytes += static_cast<size_t>(b.capacity) * sizeof(float);
  return bytes;
}

const float* CpuForwardKernels::WidenInput(DType dtype, const void*, MemoryKind memory, int64_t n) {
  if (status_.ok()) {
    status_ =
        Internal(fmt::format("CpuForwardKernels::WidenInput of {} {} elements in {} memory", n,
                             DTypeName(dtype), memory == MemoryKind::kDevice ? "device" : "host"));
  }
  return nullptr;
}

float* CpuForwardKernels::Scratch(int slot, int64_t n) {
  std::vector<Buffer>& slots = scratch_.slots;
  if (slots.size() <= static_cast<size_t>(slot)) slots.resize(static_cast<size_t>(slot) + 1);
  return slots[static_cast<size_t>(slot)].Reserve(n);
}

float* CpuForwardKernels::Buffer::Reserve(int64_t n) {
  if (capacity < n) {
    // From 4 MiB up (a long prompt's activations: 64 KiB and more per token) a mapping of its
    // own, advised as transparent huge pages, so a pass faults in 2 MiB pages rather than
    // 4 KiB ones (a 16k-token pass touches about a GiB of scratch) and the GEMMs' operands
    // miss the TLB less; kept out of malloc's heap, whose blocks THP would have to split.
    // Without THP (or with it off) the advice is a no-op.
    constexpr size_t kHugePage = size_t{2} << 20;
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    Buffer fresh;
    if (bytes >= 2 * kHugePage) {
      fresh.mapped_bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
      void* p = mmap(nullptr, fresh.mapped_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      madvise(p, fresh.mapped_bytes, MADV_HUGEPAGE);
      fresh.data = static_cast<float*>(p);
    } else {
      fresh.data = new (std::align_val_t{kCacheLineBytes}) float[static_cast<size_t>(n)];
    }
    fresh.capacity = n;
    *this = std::move(fresh);
  }
  return data;
}

CpuForwardKernels::Buffer::Buffer(Buffer&& other) noexcept
    : data(std::exchange(other.data, nullptr)),
      capacity(std::exchange(other.capacity, 0)),
      mapped_bytes(std::exchange(other.mapped_bytes, 0)) {}

CpuForwardKernels::Buffer& CpuForwardKernels::Buffer::operator=(Buffer&& other) noexcept {
  Buffer old(std::move(other));  // this one's memory leaves with `old`
  std::swap(data, old.data);
  std::swap(capacity, old.capacity);
  std::swap(mapped_bytes, old.mapped_bytes);
  return *this;
}

CpuForwardKernels::Buffer::~Buffer() {
  if (mapped_bytes > 0) {
    munmap(data, mapped_bytes);
  } else {
    ::operator delete[](data, std::align_val_t{kCacheLineBytes});
  }
}

void CpuForwardKernels::Embed(DeviceWeight table, std::span<const uint32_t> tokens, int64_t dim,
                              float* x) {
  cpu::ParallelFor(static_cast<int64_t>(tokens.size()), 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const auto row = static_cast<int64_t>(tokens[static_cast<size_t>(r)]) * dim;
      ConvertElements(table.dtype,
                      static_cast<const std::byte*>(table.data) +
                          static_cast<size_t>(row) * DTypeSize(table.dtype),
                      DType::kF32, x + r * dim, static_cast<size_t>(dim));
    }
  });
}

void CpuForwardKernels::Gemm(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx,
                             DeviceWeight w, int64_t ldw, float* y, int64_t ldy, bool accumulate,
                             const uint16_t* x16) {
  LinearGemm(m, n, k, x, ldx, x16, w, ldw, y, ldy, accumulate, &scratch_.x_bf16);
}

const uint16_t* CpuForwardKernels::Bf16Rows(const float* x, int64_t ldx, int64_t rows,
                                            int64_t cols) {
  // Without oneDNN's bf16 matmul, RowStableGemm rounds A as it packs it, at no extra pass.
  if (!cpu::DescribeGemm().bf16_native) return nullptr;
  AlignedVector<uint16_t>& buf = scratch_.rows_bf16;
  if (buf.size() < static_cast<size_t>(rows * cols)) buf.resize(static_cast<size_t>(rows * cols));
  RoundRows(x, ldx, rows, cols, buf.data());
  return buf.data();
}

void CpuForwardKernels::RmsNorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                                int64_t rows, int64_t dim, float eps) {
  RmsNormZeroCentred(x, ldx, w, y, ldy, rows, dim, eps);
}

namespace {
// x += y, xn = RmsNorm(x) and, where xn16 is given, xn rounded to bf16 (as RoundRows).
void AddRmsNormRows(float* x, const float* y, const float* w, float* xn, uint16_t* xn16,
                    int64_t rows, int64_t dim, float eps) {
  // The same sums as Add then RmsNorm (and RoundRows), with each row normalised (and rounded)
  // while it is in L1: at 16k rows xn is 32 MiB, and a separate pass reads it back from memory.
  cpu::ParallelFor(rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = x + r * dim;
      const float* yr = y + r * dim;
      for (int64_t i = 0; i < dim; ++i) xr[i] += yr[i];
      RmsNormZeroCentredRow(xr, w, xn + r * dim, dim, eps);
      if (xn16 != nullptr) cpu::ConvertRowsToBf16(xn + r * dim, dim, 1, dim, xn16 + r * dim, dim);
    }
  });
}
}  // namespace

void CpuForwardKernels::AddRmsNorm(float* x, const float* y, const float* w, float* xn,
                                   int64_t rows, int64_t dim, float eps) {
  AddRmsNormRows(x, y, w, xn, nullptr, rows, dim, eps);
}

const uint16_t* CpuForwardKernels::AddRmsNormBf16(float* x, const float* y, const float* w,
                                                  float* xn, int64_t rows, int64_t dim, float eps) {
  if (!cpu::DescribeGemm().bf16_native) {  // as Bf16Rows: the products round as they pack
    AddRmsNorm(x, y, w, xn, rows, dim, eps);
    return nullptr;
  }
  AlignedVector<uint16_t>& buf = scratch_.rows_bf16;
  if (buf.size() < static_cast<size_t>(rows * dim)) buf.resize(static_cast<size_t>(rows * dim));
  AddRmsNormRows(x, y, w, xn, buf.data(), rows, dim, eps);
  return buf.data();
}

void CpuForwardKernels::GatedRmsNorm(float* o, const float* z, int64_t ldz, const float* w,
                                     int64_t rows, int64_t heads, int64_t dim, float eps) {
  cpu::ParallelFor(rows, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t r = t0; r < t1; ++r) {
      for (int64_t hh = 0; hh < heads; ++hh) {
        GatedRmsNormRow(o + (r * heads + hh) * dim, z + r * ldz + hh * dim, w, dim, eps);
      }
    }
  });
}

void CpuForwardKernels::Add(float* x, const float* y, int64_t n) {
  cpu::ParallelFor(n, 1 << 15, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x[i] += y[i];
  });
}

void CpuForwardKernels::Fill(float* x, int64_t n, float value) { std::fill(x, x + n, value); }

void CpuForwardKernels::Copy2D(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
                               int64_t cols) {
  cpu::ParallelFor(rows, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(cols, 1)),
                   [&](int64_t r0, int64_t r1) {
                     for (int64_t r = r0; r < r1; ++r) {
                       std::memcpy(dst + r * ldd, src + r * lds,
                                   static_cast<size_t>(cols) * sizeof(float));
                     }
                   });
}

void CpuForwardKernels::Rope(float* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_dim,
                             int64_t rotary_dim, double theta, int64_t pos0) {
  ApplyRope(x, ld, rows, heads, head_dim, rotary_dim, theta, pos0);
}

void CpuForwardKernels::GdnConvInputs(const GdnInputArgs& args) {
  const GdnInputBlock block{.args = args};
  GdnConvInputsBlocks({&block, 1});
}

void CpuForwardKernels::GdnConvInputsBlocks(std::span<const GdnInputBlock> blocks) {
  if (blocks.empty()) return;
  const GdnInputArgs& first = blocks.front().args;
  const int64_t ch = first.conv_channels();
  const int32_t kernel = first.conv_kernel;
  const int64_t tail = int64_t{kernel - 1} * ch;
  const std::vector<float> taps =
      linear::ConvTaps(first.conv_weight, static_cast<int32_t>(ch), kernel);
  // Rows in tiles of kTileRows: the conv's output for a tile (64 KiB for C = 1,024) stays in
  // L1/L2 while q, k and v are taken out of it, instead of going to memory and back (at 16k
  // tokens a [T, C] f32 tensor is 64 MiB, and these loops are bound by memory bandwidth).
  constexpr int64_t kTileRows = 16;
  // The conv state each block starts from, then its tiles: the states depend only on the
  // inputs (a block's start, or the previous one's advanced past its rows), so they are known
  // before any row's conv, and every block's tiles can run side by side.
  ScratchSet& sc = scratch_;
  sc.conv_starts.resize(static_cast<size_t>(tail) * blocks.size());
  sc.row_tiles.clear();
  float* const running = first.conv_state;
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    const GdnInputArgs& a = blocks[bi].args;
    assert(a.conv_state == running && a.conv_weight == first.conv_weight &&
           a.conv_kernel == kernel && a.conv_channels() == ch);  // one layer's blocks
    if (blocks[bi].start != nullptr) std::copy_n(blocks[bi].start, tail, running);
    std::copy_n(running, tail, sc.conv_starts.data() + bi * tail);
    linear::AdvanceConvState({a.rows, static_cast<int32_t>(ch), kernel}, a.x, a.ldx, running);
    for (int64_t s0 = 0; s0 < a.rows; s0 += kTileRows) {
      sc.row_tiles.push_back({.block = bi, .r0 = s0, .r1 = std::min(a.rows, s0 + kTileRows)});
    }
  }
  cpu::ParallelFor(static_cast<int64_t>(sc.row_tiles.size()), 1, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> tile_kept;
    if (tile_kept.size() < static_cast<size_t>(kTileRows * ch)) {
      tile_kept.resize(static_cast<size_t>(kTileRows * ch));
    }
    float* const tile = tile_kept.data();
    for (int64_t i = i0; i < i1; ++i) {
      const ScratchSet::RowTile& rt = sc.row_tiles[static_cast<size_t>(i)];
      const GdnInputArgs& a = blocks[rt.block].args;
      const int64_t nk = a.key_heads, nv = a.value_heads, dk = a.dk, vw = nv * a.dv;
      const linear::ConvShape conv{a.rows, static_cast<int32_t>(ch), kernel};
      linear::ConvRows(conv, a.x, a.ldx, taps.data(), nullptr,
                       sc.conv_starts.data() + rt.block * tail, rt.r0, rt.r1, tile, ch,
                       /*apply_silu=*/true);
      for (int64_t r = rt.r0; r < rt.r1; ++r) {
        const float* m = tile + (r - rt.r0) * ch;
        for (int64_t h = 0; h < nk; ++h) {
          L2NormRow(m + h * dk, a.q + (r * nk + h) * dk, dk, a.q_scale);
        }
        for (int64_t h = 0; h < nk; ++h) {
          L2NormRow(m + (nk + h) * dk, a.k + (r * nk + h) * dk, dk, 1.0f);
        }
        std::memcpy(a.v + r * vw, m + 2 * nk * dk, static_cast<size_t>(vw) * sizeof(float));
        const float* ba = a.ba + r * a.ld_ba;
        for (int64_t h = 0; h < nv; ++h) {
          a.beta[r * nv + h] = Sigmoid(ba[h]);
          a.gate[r * nv + h] = GdnLogDecay(a.a_log[h], ba[nv + h], a.dt_bias[h]);
        }
      }
    }
  });
}

void CpuForwardKernels::LinearForward(linear::Variant variant, const linear::Shape& shape,
                                      const linear::Inputs& in, const float* initial,
                                      const linear::Outputs& out) {
  if (!status_.ok()) return;
  status_ = linear::ChunkedForward(variant, shape, in, initial, out);
}

void CpuForwardKernels::JumpState(const linear::Shape& shape, const float* transition,
                                  const float* zero_state, float* state) {
  if (transition == nullptr) {
    linear::NaiveAdd(shape, zero_state, state);
  } else {
    linear::ApplyTransition(linear::TransitionForm::kDense, shape, transition, zero_state, state);
  }
}

// Heads are independent through every step, so each thread takes a range of heads and runs all
// the steps on it: one parallel region instead of one per step, with the same bits (a head's
// chunked forward and jump run on one thread either way).
void CpuForwardKernels::LinearSteps(linear::Variant variant, const linear::Shape& shape,
                                    std::span<const LinearStep> steps, float* state) {
  if (!status_.ok()) return;
  for (const LinearStep& step : steps) {
    if (step.tokens == 0) continue;
    linear::Shape s = shape;
    s.tokens = step.tokens;
    status_ = linear::Validate(variant, s, step.in);
    if (!status_.ok()) return;
  }
  const int heads = shape.value_heads;
  const int threads = std::clamp(cpu::ComputeThreads(), 1, heads);
  const int64_t head_floats = int64_t{shape.dk} * shape.dv;
  Mutex mu;
  Status failed;
  cpu::ParallelFor(heads, (heads + threads - 1) / threads, [&](int64_t h0, int64_t h1) {
    const auto a = static_cast<int>(h0), b = static_cast<int>(h1);
    // A jump's zero state, fp32: its own, or this thread's heads of a narrow one widened into
    // `widened` at their own offsets (exactly: the bits a widened copy of the entry gives).
    thread_local std::vector<float> widened;
    const auto zero_state = [&](const LinearStep& step) {
      if (step.zero_dtype == DType::kF32) return static_cast<const float*>(step.zero_state);
      if (widened.size() < static_cast<size_t>(heads * head_floats)) {
        widened.resize(static_cast<size_t>(heads * head_floats));
      }
      const auto elem = static_cast<int64_t>(DTypeSize(step.zero_dtype));
      ConvertElements(step.zero_dtype,
                      static_cast<const std::byte*>(step.zero_state) + h0 * head_floats * elem,
                      DType::kF32, widened.data() + h0 * head_floats,
                      static_cast<size_t>((h1 - h0) * head_floats));
      return static_cast<const float*>(widened.data());
    };
    for (const LinearStep& step : steps) {
      linear::Shape s = shape;
      s.tokens = step.tokens;
      if (step.tokens > 0) {
        Status st = linear::ChunkedForwardHeads(variant, s, step.in, state,
                                                {.o = step.o, .final_state = state}, a, b);
        if (!st.ok()) {
          MutexLock lock(&mu);
          failed = std::move(st);
          return;
        }
      } else if (step.transition != nullptr) {
        linear::ApplyTransitionHeads(linear::TransitionForm::kDense, s, step.transition,
                                     zero_state(step), state, a, b);
      } else {
        const float* zero = zero_state(step);
        for (int64_t i = h0 * head_floats; i < h1 * head_floats; ++i) state[i] += zero[i];
      }
    }
  });
  if (!failed.ok()) status_ = failed;
}

void CpuForwardKernels::Attention(const AttentionShape& shape, const float* q, const float* k,
                                  const float* v, float* out, std::span<const int64_t> positions) {
  CausalAttention(shape, q, k, v, out, positions, &scratch_.kv_pack);
}

void CpuForwardKernels::AttentionSpans(const AttentionShape& shape, const KvRope& rope,
                                       const float* q, std::span<const KvSpan> kv, float* out,
                                       std::span<const int64_t> positions) {
  CausalAttention(shape, rope, q, kv, out, positions, &scratch_.kv_pack, &scratch_.kv_gather);
}

void CpuForwardKernels::SigmoidGate(float* out, const float* gate, int64_t ldg, int64_t rows,
                                    int64_t cols) {
  cpu::ParallelFor(rows, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t r = t0; r < t1; ++r) {
      const float* g = gate + r * ldg;
      float* o = out + r * cols;
      for (int64_t i = 0; i < cols; ++i) o[i] *= Sigmoid(g[i]);
    }
  });
}

void CpuForwardKernels::SwiGlu(float* gu, int64_t rows, int64_t im) {
  cpu::ParallelFor(rows, 32, [&](int64_t t0, int64_t t1) {
    for (int64_t r = t0; r < t1; ++r) SwiGluRow(gu + r * 2 * im, im);
  });
}

void CpuForwardKernels::MoeExperts(const MoeArgs& a) {
  const auto ne = static_cast<int64_t>(a.experts.size());
  const int top = static_cast<int>(a.top_k);
  if (top < 1 || top > ne) {
    if (status_.ok()) status_ = Internal("MoE top_k out of [1, experts]");
    return;
  }
  // Route every row (over the compute threads), then group the rows by expert, in row order:
  // each expert runs as one GEMM pair over its rows.
  std::vector<int32_t>& chosen = scratch_.chosen;
  std::vector<float>& chosen_weights = scratch_.chosen_weights;
  chosen.resize(static_cast<size_t>(a.rows * top));
  chosen_weights.resize(static_cast<size_t>(a.rows * top));
  cpu::ParallelFor(a.rows, 256, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      RouteRow(a.logits + r * ne, ne, top, a.norm_topk_prob, chosen.data() + r * top,
               chosen_weights.data() + r * top);
    }
  });
  auto& rows = scratch_.expert_rows;
  auto& weights = scratch_.expert_weights;
  rows.resize(static_cast<size_t>(ne));
  weights.resize(static_cast<size_t>(ne));
  for (int64_t e = 0; e < ne; ++e) {
    rows[static_cast<size_t>(e)].clear();
    weights[static_cast<size_t>(e)].clear();
  }
  for (int64_t i = 0; i < a.rows * top; ++i) {
    const auto e = static_cast<size_t>(chosen[static_cast<size_t>(i)]);
    rows[e].push_back(i / top);
    weights[e].push_back(chosen_weights[static_cast<size_t>(i)]);
  }
  std::vector<ExpertWork> work;
  for (int64_t e = 0; e < ne; ++e) {
    if (rows[static_cast<size_t>(e)].empty()) continue;
    const ExpertWeights& ew = a.experts[static_cast<size_t>(e)];
    work.push_back({ew.gate_up, ew.down, a.intermediate, rows[static_cast<size_t>(e)],
                    weights[static_cast<size_t>(e)]});
  }
  RoutedExperts(a.x, a.x16, work, a.hidden, a.rows, a.y, /*accumulate=*/false);
}

void CpuForwardKernels::SwiGluMlp(DeviceWeight gate_up, DeviceWeight down, int64_t im,
                                  const float* x, const uint16_t* x16, int64_t rows, int64_t hidden,
                                  float* /*gu*/, float* out) {
  MlpRows(gate_up, down, im, x, x16, {}, rows, hidden, out);
}

void CpuForwardKernels::MlpRows(DeviceWeight gate_up, DeviceWeight down, int64_t im, const float* x,
                                const uint16_t* x16, std::span<const int64_t> index, int64_t n,
                                int64_t hidden, float* y, std::span<const float> scale) {
  // Rows per tile: its gate-up products (tile x 2 im fp32), activations and outputs stay in
  // the thread's L2 beside the weights (builtin:small: 256 KiB + 64 + 128 beside 1.5 MiB).
  constexpr int64_t kMaxTileRows = 64;
  const bool gather16 = x16 != nullptr && gate_up.dtype == DType::kBF16;
  const bool hidden16 = down.dtype == DType::kBF16;
  // Whole tiles to each thread, so a row's tile (and so its GEMM calls) does not depend on
  // the thread count. A few tiles are made an even number of equal ones, so two threads get
  // the same work: a compose's 160 rows in 3 tiles of 64 gave one thread 128 rows and the
  // other 32 (4 tiles of 40 now). Many tiles (a prefill) keep 64 rows, the GEMMs' best shape.
  constexpr int64_t kBalancedBelowTiles = 16;
  int64_t tiles = (n + kMaxTileRows - 1) / kMaxTileRows;
  if (tiles > 1 && tiles < kBalancedBelowTiles && tiles % 2 == 1) ++tiles;
  const int64_t tile_rows = std::max<int64_t>(1, (n + tiles - 1) / tiles);
  tiles = (n + tile_rows - 1) / tile_rows;
  cpu::ParallelFor(tiles, 1, [&](int64_t first, int64_t last) {
    const int64_t j0 = first * tile_rows, j1 = std::min(n, last * tile_rows);
    // The running thread's tile buffers, kept between calls, on cache lines (the GEMMs' AMX
    // tiles load and store them row by row).
    thread_local AlignedVector<float> xs, gu, ys;
    thread_local AlignedVector<uint16_t> xs16, h16, rounding;
    const auto fit = [](auto& v, int64_t size) {
      if (v.size() < static_cast<size_t>(size)) v.resize(static_cast<size_t>(size));
    };
    fit(gu, kMaxTileRows * 2 * im);
    for (int64_t t0 = j0; t0 < j1; t0 += tile_rows) {
      const int64_t t = std::min(tile_rows, j1 - t0);
      // The products run on `tp` rows, t rounded up to whole groups of 16, the extra ones zero
      // in the tile's own buffers: a call with a partial group would run on padded copies of
      // its A and C rows (gemm.h's row split), which cost a compose's experts (~40 rows each)
      // more than the gathers do. A row's bits are the same either way.
      const int64_t tp = (t + 15) / 16 * 16;
      // The tile's rows of x, or of its bf16 rounding (half the bytes, no rounding pass): in
      // place when they are x's own and whole groups, else gathered.
      const auto gather = [&](auto* src, auto& dst) {
        fit(dst, kMaxTileRows * hidden);
        for (int64_t j = 0; j < t; ++j) {
          const int64_t row = index.empty() ? t0 + j : index[static_cast<size_t>(t0 + j)];
          std::copy_n(src + row * hidden, hidden, dst.data() + j * hidden);
        }
        std::fill(dst.begin() + t * hidden, dst.begin() + tp * hidden, 0);
        return dst.data();
      };
      const bool in_place = index.empty() && tp == t;
      const float* xf = nullptr;
      const uint16_t* xb = nullptr;
      if (gather16) {
        xb = in_place ? x16 + t0 * hidden : gather(x16, xs16);
      } else {
        xf = in_place ? x + t0 * hidden : gather(x, xs);
      }
      LinearGemm(tp, 2 * im, hidden, xf, hidden, xb, gate_up, hidden, gu.data(), 2 * im, false,
                 &rounding);
      float* const yt = y + t0 * hidden;
      // The down product's rows: y's own, or a tile of tp rows copied or added back.
      float* out = yt;
      if (tp != t || !scale.empty()) {
        fit(ys, kMaxTileRows * hidden);
        out = ys.data();
      }
      if (!hidden16) {
        for (int64_t r = 0; r < tp; ++r) SwiGluRow(gu.data() + r * 2 * im, im);
        LinearGemm(tp, hidden, im, gu.data(), 2 * im, nullptr, down, im, out, hidden, false,
                   &rounding);
      } else {
        // The activation rounded to bf16 as down's product would round it, row by row in L1.
        fit(h16, kMaxTileRows * im);
        for (int64_t r = 0; r < tp; ++r)
          SwiGluRowToBf16(gu.data() + r * 2 * im, im, h16.data() + r * im);
        LinearGemm(tp, hidden, im, nullptr, 0, h16.data(), down, im, out, hidden, false, &rounding);
      }
      if (!scale.empty()) {
        for (int64_t j = 0; j < t; ++j) {
          const int64_t row = index.empty() ? t0 + j : index[static_cast<size_t>(t0 + j)];
          float* yr = y + row * hidden;
          AddScaledRow(yr, scale[static_cast<size_t>(t0 + j)], out + j * hidden, hidden);
        }
      } else if (out != yt) {
        std::copy_n(out, t * hidden, yt);
      }
    }
  });
}

void CpuForwardKernels::RoutedExperts(const float* x, const uint16_t* x16,
                                      std::span<const ExpertWork> experts, int64_t hidden,
                                      int64_t rows, float* y, bool accumulate) {
  // Few rows per expert (a compose, a decode step): each expert on one thread, side by side,
  // its output into a buffer of its own, then into y row by row in expert order (a row routed
  // to two experts gets both sums in the same order as one by one). The buffers are slices of
  // one uninitialised allocation kept between passes: per-expert vectors zero-filled and
  // faulted in whatever they grew by (80 ms of a cold 16k-token pass). Many (a prefill): one
  // expert after another with the whole budget, whose GEMMs split well and stay balanced
  // however unevenly the router spread the rows, each tile adding into y itself: the same
  // sums in the same order.
  constexpr int64_t kGroupedBelowRows = 128;  // mean rows per expert
  const auto ne = static_cast<int64_t>(experts.size());
  std::vector<int64_t>& first = scratch_.expert_out_offsets;  // per expert, its first element
  first.resize(static_cast<size_t>(ne));
  int64_t routed = 0;
  for (int64_t e = 0; e < ne; ++e) {
    first[static_cast<size_t>(e)] = routed * hidden;
    routed += static_cast<int64_t>(experts[static_cast<size_t>(e)].rows.size());
  }
  const bool grouped = routed < kGroupedBelowRows * std::max<int64_t>(ne, 1);
  if (!grouped) {
    // One expert after another: each tile adds its rows into y straight from cache (a row's
    // experts in expert order, as below), not through a buffer of every routed row (a 16k
    // prefill wrote and read back 67 MB a layer).
    if (!accumulate) {
      cpu::ParallelFor(rows, 64, [&](int64_t r0, int64_t r1) {
        std::fill(y + r0 * hidden, y + r1 * hidden, 0.0f);
      });
    }
    for (const ExpertWork& w : experts) {
      MlpRows(w.gate_up, w.down, w.intermediate, x, x16, w.rows,
              static_cast<int64_t>(w.rows.size()), hidden, y, w.weights);
    }
    return;
  }
  float* const outs = scratch_.expert_out.Reserve(routed * hidden);
  cpu::ParallelFor(ne, 1, [&](int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      const ExpertWork& w = experts[static_cast<size_t>(e)];
      MlpRows(w.gate_up, w.down, w.intermediate, x, x16, w.rows,
              static_cast<int64_t>(w.rows.size()), hidden, outs + first[static_cast<size_t>(e)]);
    }
  });
  // Each row's (expert, index) entries in expert order, by a counting sort over the rows.
  std::vector<int32_t>& offsets = scratch_.routed_offsets;
  auto& entries = scratch_.routed;
  offsets.assign(static_cast<size_t>(rows + 1), 0);
  for (const ExpertWork& w : experts) {
    for (const int64_t r : w.rows) ++offsets[static_cast<size_t>(r + 1)];
  }
  for (int64_t r = 0; r < rows; ++r) {
    offsets[static_cast<size_t>(r + 1)] += offsets[static_cast<size_t>(r)];
  }
  entries.resize(static_cast<size_t>(routed));
  {
    std::vector<int32_t> next(offsets.begin(), offsets.end() - 1);
    for (int64_t e = 0; e < ne; ++e) {
      const ExpertWork& w = experts[static_cast<size_t>(e)];
      for (size_t j = 0; j < w.rows.size(); ++j) {
        entries[static_cast<size_t>(next[static_cast<size_t>(w.rows[j])]++)] = {
            static_cast<int32_t>(e), static_cast<int32_t>(j)};
      }
    }
  }
  cpu::ParallelFor(rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* yr = y + r * hidden;
      if (!accumulate) std::fill(yr, yr + hidden, 0.0f);
      for (int32_t i = offsets[static_cast<size_t>(r)]; i < offsets[static_cast<size_t>(r + 1)];
           ++i) {
        const auto [e, j] = entries[static_cast<size_t>(i)];
        const ExpertWork& w = experts[static_cast<size_t>(e)];
        const float wgt = w.weights[static_cast<size_t>(j)];
        AddScaledRow(yr, wgt, outs + first[static_cast<size_t>(e)] + int64_t{j} * hidden, hidden);
      }
    }
  });
}

void CpuForwardKernels::SharedExpert(DeviceWeight gate_up, DeviceWeight down, int64_t im,
                                     const float* gate_w, const float* x, const uint16_t* x16,
                                     int64_t rows, int64_t hidden, float* /*gu*/, float* /*out*/,
                                     float* y) {
  // Each tile's outputs go into y from cache (AddScaledRow, as the routed experts' do), not
  // through a buffer of every row's (32 MB at 16k rows: a 16k prefill's peak RSS 36 MB lower;
  // its speed the same within the noise of 8 interleaved pairs).
  std::vector<float>& gates = scratch_.shared_gates;
  gates.resize(static_cast<size_t>(rows));
  cpu::ParallelFor(rows, 256, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      gates[static_cast<size_t>(r)] = SharedExpertGate(x + r * hidden, gate_w, hidden);
    }
  });
  MlpRows(gate_up, down, im, x, x16, {}, rows, hidden, y, gates);
}

}  // namespace hypic::model

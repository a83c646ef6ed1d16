#include "gpu/cpu/row_stable_gemm.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "gpu/cpu/compute_threads.h"
#include "gpu/cpu/vec8.h"

namespace hypic::cpu {
namespace {

constexpr int64_t kPanel = kRowStablePanel;  // columns of a packed B panel: two 8-wide vectors
static_assert(kPanel == 16, "vec8::PanelChain reads panels of two 8-lane vectors");
constexpr int kTileRows = 6;       // rows of the micro-tile: 12 accumulators
constexpr int64_t kRowBlock = 48;  // rows whose partial sums stay in a thread's buffer
static_assert(kRowBlock % kTileRows == 0, "row blocks hold whole tiles");
constexpr int64_t kWidenWholeFromRows = 4 * kRowBlock;  // RowStableGemmPanels
constexpr int64_t kPackGrain = int64_t{1} << 15;        // elements a packing thread takes at least
constexpr int64_t kDepthBlock = 256;  // k per pass over a panel (16 KiB of packed B)

using vec8::Load;
using vec8::Splat;
using vec8::Store;
using vec8::V8;

// t[r][0, 16) (row stride ldt) = (first ? 0 : t[r]) + sum over kk < depth, in order, of
// A(r, kk) * panel[kk][0, 16), for R <= kTileRows rows of A packed as a[kk * kTileRows + r]:
// one FMA chain per element.
template <int R>
void Tile(const float* a, const float* panel, int64_t depth, bool first, float* t, int64_t ldt) {
  V8 acc[R][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    acc[r][0] = first ? V8{} : Load(t + r * ldt);
    acc[r][1] = first ? V8{} : Load(t + r * ldt + 8);
  }
  vec8::PanelChain<R, 1, kTileRows>(a, panel, depth, acc);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    Store(t + r * ldt, acc[r][0]);
    Store(t + r * ldt + 8, acc[r][1]);
  }
}

#if defined(__AVX512F__)
// Tile over two adjacent panels at once in 16-lane vectors (12 accumulators, as Tile's): the same
// FMA chain per element in the same order, so the same bits, at twice the lanes an instruction.
// t[r][0, 32) (row stride ldt) from panel0 (columns 0-15) and panel1 (16-31).
template <int R>
void TilePair(const float* a, const float* panel0, const float* panel1, int64_t depth, bool first,
              float* t, int64_t ldt) {
  __m512 acc[R][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    acc[r][0] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(t + r * ldt);
    acc[r][1] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(t + r * ldt + kPanel);
  }
#pragma GCC unroll 4
  for (int64_t kk = 0; kk < depth; ++kk) {
    const __m512 b0 = _mm512_loadu_ps(panel0 + kk * kPanel);
    const __m512 b1 = _mm512_loadu_ps(panel1 + kk * kPanel);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[kk * kTileRows + r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(t + r * ldt, acc[r][0]);
    _mm512_storeu_ps(t + r * ldt + kPanel, acc[r][1]);
  }
}
#endif

// c[0, count) = alpha s + beta c (beta == 0: alpha s, c unread), count <= 8; every element,
// a tail's too, through the same vector expression, so its bits do not depend on where the
// call's columns end.
inline void Finish(const float* s, float* c, int64_t count, float alpha, float beta) {
  float tail[8] = {};
  float* const out = count == 8 ? c : tail;
  if (count < 8 && beta != 0.0f) __builtin_memcpy(tail, c, static_cast<size_t>(count) * 4);
  const V8 sum = Load(s);
  Store(out, beta == 0.0f ? Splat(alpha) * sum : Splat(alpha) * sum + Splat(beta) * Load(out));
  if (count < 8) __builtin_memcpy(c, tail, static_cast<size_t>(count) * 4);
}

// An operand element as fp32: bf16 widened exactly (its bits are fp32's top half).
inline float Widen(float x) { return x; }
inline float Widen(uint16_t x) {
  const uint32_t bits = uint32_t{x} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// fp32 rounded to bf16 (core/dtype.h's F32ToBf16: nearest even, NaN kept quiet) and widened
// back, on one value or on 8 lanes with the same bits.
inline float RoundToBf16(float x) { return Widen(F32ToBf16(x)); }
inline V8 RoundToBf16(V8 x) {
  vec8::U8 u;
  __builtin_memcpy(&u, &x, sizeof u);
  const vec8::U8 nearest = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const vec8::U8 quiet_nan = (u & 0xffff0000u) | 0x00400000u;
  u = (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : nearest;
  V8 y;
  __builtin_memcpy(&y, &u, sizeof y);
  return y;
}
inline V8 Widen(V8 x) { return x; }

// dst[i] = Widen(src[i]) for i < count, 16 lanes at a time (written out: GCC left the loop over
// a thread-local block scalar, a third of a few-row product's time).
inline void WidenBf16(const uint16_t* src, float* dst, int64_t count) {
  typedef uint16_t H16 __attribute__((vector_size(32)));
  typedef uint32_t W16 __attribute__((vector_size(64)));
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    H16 h;
    __builtin_memcpy(&h, src + i, sizeof h);
    const W16 w = __builtin_convertvector(h, W16) << 16;
    __builtin_memcpy(dst + i, &w, sizeof w);
  }
  for (; i < count; ++i) dst[i] = Widen(src[i]);
}

#if defined(__AVX__)
// One whole tile of PackA from fp32 rows (row stride lda): dst[kk * kTileRows + r] =
// convert(src[r * lda + kk]), 8 columns at a time, the 6 x 8 block converted in 8 lanes and
// transposed in registers (two zero rows make it 8 x 8), its columns stored over each other's
// two spare lanes (the last one masked: the next tile may be another thread's).
template <typename Convert>
void PackTileRows(const float* src, int64_t lda, int64_t k, float* dst, Convert convert) {
  static_assert(kTileRows == 6, "a 6 x 8 block in an 8 x 8 transpose");
  const __m256i first6 = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    __m256 r[8];
    for (int i = 0; i < kTileRows; ++i) r[i] = convert(Load(src + i * lda + kk));
    r[6] = r[7] = _mm256_setzero_ps();
    __m256 t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i) {  // rows 4i..4i+3, two columns per 128-bit half
      u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
      u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
      u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
      u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    float* out = dst + kk * kTileRows;
    for (int j = 0; j < 4; ++j) {  // column j from the low halves, column j + 4 from the high
      const __m256 lo = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
      _mm256_storeu_ps(out + j * kTileRows, lo);
    }
    for (int j = 0; j < 3; ++j) {
      _mm256_storeu_ps(out + (4 + j) * kTileRows, _mm256_permute2f128_ps(u[j], u[4 + j], 0x31));
    }
    _mm256_maskstore_ps(out + 7 * kTileRows, first6, _mm256_permute2f128_ps(u[3], u[7], 0x31));
  }
  for (; kk < k; ++kk) {
    for (int i = 0; i < kTileRows; ++i) dst[kk * kTileRows + i] = convert(src[i * lda + kk]);
  }
}
#endif

using TileFn = void (*)(const float*, const float*, int64_t, bool, float*, int64_t);
constexpr TileFn kTiles[kTileRows] = {Tile<1>, Tile<2>, Tile<3>, Tile<4>, Tile<5>, Tile<6>};
#if defined(__AVX512F__)
using TilePairFn = void (*)(const float*, const float*, const float*, int64_t, bool, float*,
                            int64_t);
constexpr TilePairFn kTilePairs[kTileRows] = {TilePair<1>, TilePair<2>, TilePair<3>,
                                              TilePair<4>, TilePair<5>, TilePair<6>};
constexpr int64_t kPanelsPerStep = 2;
#else
constexpr int64_t kPanelsPerStep = 1;
#endif

// A calling thread's packing buffers, shared by every operand type (grown, never shrunk; B's
// holds a whole operand in fp32), and each compute thread's partial sums.
struct PackBuffers {
  std::vector<float> b, a;
};
PackBuffers& CallerBuffers() {
  thread_local PackBuffers buffers;
  return buffers;
}
std::vector<float>& SumBuffer() {
  thread_local std::vector<float> sums;
  return sums;
}

// C = beta C for an empty product (k == 0; beta == 0 writes zeros).
void ScaleOnly(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) c[r * ldc + j] = beta == 0.0f ? 0.0f : beta * c[r * ldc + j];
  }
}

// op(A) [m, k], of element type TA, converted to fp32 by `convert` (Widen, or RoundToBf16; for
// one value and, with fp32 rows, for 8 lanes) into the caller's buffer by tiles of kTileRows rows,
// each tile's column kk contiguous (a tile's broadcasts then read one stream): ap[(tile * k + kk) *
// kTileRows + r].
template <typename TA, typename Convert>
const float* PackA(Trans ta, int64_t m, int64_t k, const TA* a, int64_t lda, Convert convert) {
  const int64_t tiles = (m + kTileRows - 1) / kTileRows;
  std::vector<float>& kept = CallerBuffers().a;
  if (kept.size() < static_cast<size_t>(tiles * k * kTileRows)) {
    kept.resize(static_cast<size_t>(tiles * k * kTileRows));
  }
  float* const ap = kept.data();
  // Small operands (attention, the chunk products) are packed by one thread: a fork costs more.
  ParallelFor(tiles, std::max<int64_t>(1, kPackGrain / (k * kTileRows)),
              [&](int64_t t0, int64_t t1) {
                for (int64_t tile = t0; tile < t1; ++tile) {
                  float* dst = ap + tile * k * kTileRows;
                  const int64_t rows = std::min<int64_t>(kTileRows, m - tile * kTileRows);
#if defined(__AVX__)
                  if constexpr (std::is_same_v<TA, float>) {
                    if (ta == Trans::kNo && rows == kTileRows) {
                      PackTileRows(a + tile * kTileRows * lda, lda, k, dst, convert);
                      continue;
                    }
                  }
#endif
                  for (int64_t r = 0; r < rows; ++r) {
                    const int64_t row = tile * kTileRows + r;
                    if (ta == Trans::kNo) {
                      const TA* src = a + row * lda;
                      for (int64_t kk = 0; kk < k; ++kk) dst[kk * kTileRows + r] = convert(src[kk]);
                    } else {
                      for (int64_t kk = 0; kk < k; ++kk)
                        dst[kk * kTileRows + r] = convert(a[kk * lda + row]);
                    }
                  }
                }
              });
  return ap;
}

// op(B) [k, n], of element type TB, into bp as panels of kPanel columns, k rows each, zero past
// column n: bp[(p * k + kk) * kPanel + j]; the elements widened to fp32 (TD float) or kept as
// they are (TD == TB: a weight's bf16 panels).
template <typename TB, typename TD>
void PackBInto(Trans tb, int64_t n, int64_t k, const TB* b, int64_t ldb, TD* bp) {
  auto as_panel = [](TB x) -> TD {
    if constexpr (std::is_same_v<TD, TB>) {
      return x;
    } else {
      return Widen(x);
    }
  };
  const int64_t panels = (n + kPanel - 1) / kPanel;
  // Read along B's stored rows: op(B)'s rows when tb == kNo, its columns when kYes (then in
  // chunks of k, so the panel rows being written stay in L1).
  constexpr int64_t kChunk = 64;
  ParallelFor(panels, std::max<int64_t>(1, kPackGrain / (k * kPanel)), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      TD* dst = bp + p * k * kPanel;
      const int64_t cols = std::min(kPanel, n - p * kPanel);
      if (tb == Trans::kNo) {
        for (int64_t kk = 0; kk < k; ++kk) {
          const TB* src = b + kk * ldb + p * kPanel;
          for (int64_t j = 0; j < kPanel; ++j) {
            dst[kk * kPanel + j] = j < cols ? as_panel(src[j]) : TD{0};
          }
        }
        continue;
      }
      for (int64_t k0 = 0; k0 < k; k0 += kChunk) {
        const int64_t k1 = std::min(k, k0 + kChunk);
        for (int64_t j = 0; j < kPanel; ++j) {
          const TB* src = b + (p * kPanel + j) * ldb;
          for (int64_t kk = k0; kk < k1; ++kk) {
            dst[kk * kPanel + j] = j < cols ? as_panel(src[kk]) : TD{0};
          }
        }
      }
    }
  });
}

// The same into the caller's buffer.
template <typename TB>
const float* PackB(Trans tb, int64_t n, int64_t k, const TB* b, int64_t ldb) {
  const int64_t elements = RowStablePanelElements(n, k);
  std::vector<float>& kept = CallerBuffers().b;
  if (kept.size() < static_cast<size_t>(elements)) kept.resize(static_cast<size_t>(elements));
  PackBInto(tb, n, k, b, ldb, kept.data());
  return kept.data();
}

// Where the tiles read op(B) from, one (panel, depth block) at a time: Block(p, k0, depth, slot)
// gives rows [k0, k0 + depth) of panel p, fp32, [depth][kPanel] (slot < kPanelsPerStep: the
// blocks a step's tiles read together stay apart).
// op(B) packed in fp32 (PackB, or the caller's RowStablePanelsF32), panel p at
// data + p * panel_stride.
struct F32Panels {
  const float* data;
  int64_t panel_stride;
  const float* Block(int64_t p, int64_t k0, int64_t /*depth*/, int /*slot*/) const {
    return data + p * panel_stride + k0 * kPanel;
  }
};
// A weight kept in bf16 panels (PackRowStablePanels), each block widened into the running
// thread's buffer when its tiles need it: the weight is read once, in bf16, and never copied
// whole.
struct Bf16Panels {
  const uint16_t* data;
  int64_t k;
  const float* Block(int64_t p, int64_t k0, int64_t depth, int slot) const {
    alignas(64) static thread_local float blocks[kPanelsPerStep][kDepthBlock * kPanel];
    float* const dst = blocks[slot];
    const uint16_t* const src = data + (p * k + k0) * kPanel;
    WidenBf16(src, dst, depth * kPanel);
    return dst;
  }
};

// C = alpha op(A) op(B) + beta C from the packed A (PackA) and op(B)'s panels, m, n, k > 0.
template <typename Panels>
void Multiply(const float* ap, const Panels& b, int64_t m, int64_t n, int64_t k, float alpha,
              float beta, float* c, int64_t ldc) {
  const int64_t panels = (n + kPanel - 1) / kPanel;
  // Rows [r0, r1) x panels [p0, p1): per row block, the partial sums in the thread's buffer
  // through every depth block, then alpha and beta applied once.
  // C = A op(B) over whole panels (the projections' usual call) keeps its partial sums in C
  // itself: alpha s is s then, bit for bit, and the pass that copies the sums out goes.
  const bool sums_in_c = alpha == 1.0f && beta == 0.0f && n % kPanel == 0;
  auto work = [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
    const int64_t width = (p1 - p0) * kPanel;
    float* sums = nullptr;
    if (!sums_in_c) {
      std::vector<float>& sums_kept = SumBuffer();
      if (sums_kept.size() < static_cast<size_t>(kRowBlock * width)) {
        sums_kept.resize(static_cast<size_t>(kRowBlock * width));
      }
      sums = sums_kept.data();
    }
    for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
      const int64_t rows = std::min(kRowBlock, r1 - rb);
      float* const t0 = sums_in_c ? c + rb * ldc + p0 * kPanel : sums;
      const int64_t ldt = sums_in_c ? ldc : width;
      for (int64_t k0 = 0; k0 < k; k0 += kDepthBlock) {
        const int64_t depth = std::min(kDepthBlock, k - k0);
        const float* const a_block = ap + (rb / kTileRows * k + k0) * kTileRows;
        for (int64_t p = p0; p < p1; p += kPanelsPerStep) {
          float* t = t0 + (p - p0) * kPanel;
#if defined(__AVX512F__)
          if (p + 1 < p1) {
            const float* panel0 = b.Block(p, k0, depth, 0);
            const float* panel1 = b.Block(p + 1, k0, depth, 1);
            for (int64_t r = 0; r < rows; r += kTileRows) {
              const auto tile_rows = static_cast<int>(std::min<int64_t>(kTileRows, rows - r));
              kTilePairs[tile_rows - 1](a_block + r * k, panel0, panel1, depth, k0 == 0,
                                        t + r * ldt, ldt);
            }
            continue;
          }
#endif
          const float* panel = b.Block(p, k0, depth, 0);
          for (int64_t r = 0; r < rows; r += kTileRows) {
            const auto tile_rows = static_cast<int>(std::min<int64_t>(kTileRows, rows - r));
            kTiles[tile_rows - 1](a_block + r * k, panel, depth, k0 == 0, t + r * ldt, ldt);
          }
        }
      }
      if (sums_in_c) continue;
      const int64_t j0 = p0 * kPanel, j1 = std::min(n, p1 * kPanel);
      for (int64_t r = 0; r < rows; ++r) {
        const float* s = sums + r * width - j0;
        float* cr = c + (rb + r) * ldc;
        for (int64_t j = j0; j < j1; j += 8) {
          Finish(s + j, cr + j, std::min<int64_t>(8, j1 - j), alpha, beta);
        }
      }
    }
  };
  // Split by row blocks when there are enough of them to balance (the last may be short);
  // else by panels, which come in equal widths.
  const int64_t row_blocks = (m + kRowBlock - 1) / kRowBlock;
  const int64_t threads = ComputeThreads();
  if (row_blocks >= 4 * threads || panels < 2 * threads) {
    ParallelFor(row_blocks, 1, [&](int64_t b0, int64_t b1) {
      work(b0 * kRowBlock, std::min(m, b1 * kRowBlock), 0, panels);
    });
  } else {
    ParallelFor(panels, 2, [&](int64_t p0, int64_t p1) { work(0, m, p0, p1); });
  }
}

// The product for operands of element types TA and TB, widened to fp32 as they are packed.
template <typename TA, typename TB>
void Product(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const TA* a,
             int64_t lda, const TB* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return ScaleOnly(m, n, beta, c, ldc);
  const float* bp = PackB(tb, n, k, b, ldb);
  const float* ap = PackA(ta, m, k, a, lda, [](auto x) { return Widen(x); });
  Multiply(ap, F32Panels{bp, k * kPanel}, m, n, k, alpha, beta, c, ldc);
}

// C = alpha A W^T + beta C from the packed A and W's panels.
void PanelsProduct(const float* ap, int64_t m, int64_t n, int64_t k, float alpha,
                   const uint16_t* panels, float beta, float* c, int64_t ldc) {
  // Few row blocks (a decode step, a compose's live rows, an expert's share): each block of W
  // widened as its tiles need it. Many: each would widen all of W again, so W is widened
  // once, whole (the panels' layout is already the packed one).
  if (m < kWidenWholeFromRows) {
    return Multiply(ap, Bf16Panels{panels, k}, m, n, k, alpha, beta, c, ldc);
  }
  const int64_t elements = RowStablePanelElements(n, k);
  std::vector<float>& kept = CallerBuffers().b;
  if (kept.size() < static_cast<size_t>(elements)) kept.resize(static_cast<size_t>(elements));
  float* const bp = kept.data();
  ParallelFor(elements, int64_t{1} << 14,
              [&](int64_t i0, int64_t i1) { WidenBf16(panels + i0, bp + i0, i1 - i0); });
  Multiply(ap, F32Panels{bp, k * kPanel}, m, n, k, alpha, beta, c, ldc);
}

}  // namespace

void RowStableGemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  Product(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void RowStableGemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha,
                   const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                   float* c, int64_t ldc) {
  Product(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

int64_t RowStablePanelElements(int64_t n, int64_t k) {
  return (n + kPanel - 1) / kPanel * kPanel * k;
}

void PackRowStablePanels(const uint16_t* w, int64_t n, int64_t k, uint16_t* panels) {
  PackBInto(Trans::kYes, n, k, w, k, panels);  // op(B) = W^T
}

void UnpackRowStablePanels(const uint16_t* panels, int64_t n, int64_t k, uint16_t* w) {
  for (int64_t row = 0; row < n; ++row) {
    const uint16_t* src = panels + row / kPanel * k * kPanel + row % kPanel;
    for (int64_t kk = 0; kk < k; ++kk) w[row * k + kk] = src[kk * kPanel];
  }
}

void RowStableGemmPanels(int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                         int64_t lda, const uint16_t* panels, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return ScaleOnly(m, n, beta, c, ldc);
  const float* ap = PackA(Trans::kNo, m, k, a, lda, [](uint16_t x) { return Widen(x); });
  PanelsProduct(ap, m, n, k, alpha, panels, beta, c, ldc);
}

void PackRowStablePanelsF32(Trans tb, int64_t n, int64_t k, const float* b, int64_t ldb,
                            float* panels) {
  if (n > 0 && k > 0) PackBInto(tb, n, k, b, ldb, panels);
}

void RowStableGemmPanelsRoundingA(int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                                  int64_t lda, const uint16_t* panels, float beta, float* c,
                                  int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return ScaleOnly(m, n, beta, c, ldc);
  const float* ap = PackA(Trans::kNo, m, k, a, lda, [](auto x) { return RoundToBf16(x); });
  PanelsProduct(ap, m, n, k, alpha, panels, beta, c, ldc);
}

}  // namespace hypic::cpu

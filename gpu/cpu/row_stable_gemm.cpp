#include "gpu/cpu/row_stable_gemm.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "gpu/cpu/compute_threads.h"

namespace hypic::cpu {
namespace {

constexpr int64_t kPanel = 16;     // columns of a packed B panel: two 8-wide vectors
constexpr int kTileRows = 6;       // rows of the micro-tile: 12 accumulators
constexpr int64_t kRowBlock = 48;  // rows whose partial sums stay in a thread's buffer
static_assert(kRowBlock % kTileRows == 0, "row blocks hold whole tiles");
constexpr int64_t kDepthBlock = 256;  // k per pass over a panel (16 KiB of packed B)

// Without AVX, GCC warns that passing 32-byte vectors changes the ABI; these helpers are
// internal to this file and inlined, so no call crosses an ABI boundary.
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float V8 __attribute__((vector_size(32)));

inline V8 Load(const float* p) {
  V8 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void Store(float* p, V8 v) { __builtin_memcpy(p, &v, sizeof v); }
inline V8 Broadcast(const float* p) {
#if defined(__AVX__)
  return _mm256_broadcast_ss(p);  // a load, no shuffle
#else
  const float x = *p;
  return V8{x, x, x, x, x, x, x, x};
#endif
}
inline V8 Splat(float x) { return V8{x, x, x, x, x, x, x, x}; }
inline V8 Fma(V8 a, V8 b, V8 c) {
#if defined(__FMA__)
  return _mm256_fmadd_ps(a, b, c);
#else
  return a * b + c;
#endif
}

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
#pragma GCC unroll 4
  for (int64_t kk = 0; kk < depth; ++kk) {
    const V8 b0 = Load(panel + kk * kPanel), b1 = Load(panel + kk * kPanel + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const V8 av = Broadcast(a + kk * kTileRows + r);
      acc[r][0] = Fma(av, b0, acc[r][0]);
      acc[r][1] = Fma(av, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    Store(t + r * ldt, acc[r][0]);
    Store(t + r * ldt + 8, acc[r][1]);
  }
}

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

using TileFn = void (*)(const float*, const float*, int64_t, bool, float*, int64_t);
constexpr TileFn kTiles[kTileRows] = {Tile<1>, Tile<2>, Tile<3>, Tile<4>, Tile<5>, Tile<6>};

// A calling thread's packing buffers, shared by every operand type (grown, never shrunk; B's
// holds a whole weight in fp32), and each compute thread's partial sums.
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

// The product for operands of element types TA and TB (float or bf16 bits), widened to fp32
// as they are packed.
template <typename TA, typename TB>
void Product(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const TA* a,
             int64_t lda, const TB* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) c[r * ldc + j] = beta == 0.0f ? 0.0f : beta * c[r * ldc + j];
    }
    return;
  }
  // op(B) [k, n] packed as panels of 16 columns, k rows each, zero past column n.
  const int64_t panels = (n + kPanel - 1) / kPanel;
  PackBuffers& kept = CallerBuffers();
  if (kept.b.size() < static_cast<size_t>(panels * k * kPanel)) {
    kept.b.resize(static_cast<size_t>(panels * k * kPanel));
  }
  float* const bp = kept.b.data();
  // Read along B's stored rows: op(B)'s rows when tb == kNo, its columns when kYes.
  ParallelFor(panels, 4, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* dst = bp + p * k * kPanel;
      const int64_t cols = std::min(kPanel, n - p * kPanel);
      if (tb == Trans::kNo) {
        for (int64_t kk = 0; kk < k; ++kk) {
          const TB* src = b + kk * ldb + p * kPanel;
          for (int64_t j = 0; j < kPanel; ++j)
            dst[kk * kPanel + j] = j < cols ? Widen(src[j]) : 0.0f;
        }
        continue;
      }
      for (int64_t j = 0; j < cols; ++j) {
        const TB* src = b + (p * kPanel + j) * ldb;
        for (int64_t kk = 0; kk < k; ++kk) dst[kk * kPanel + j] = Widen(src[kk]);
      }
      for (int64_t j = cols; j < kPanel; ++j) {
        for (int64_t kk = 0; kk < k; ++kk) dst[kk * kPanel + j] = 0.0f;
      }
    }
  });
  // op(A) [m, k] packed by tiles of kTileRows rows, each tile's column kk contiguous (a
  // tile's broadcasts then read one stream): ap[(tile * k + kk) * kTileRows + r].
  const int64_t tiles = (m + kTileRows - 1) / kTileRows;
  if (kept.a.size() < static_cast<size_t>(tiles * k * kTileRows)) {
    kept.a.resize(static_cast<size_t>(tiles * k * kTileRows));
  }
  float* const ap = kept.a.data();
  ParallelFor(tiles, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t tile = t0; tile < t1; ++tile) {
      float* dst = ap + tile * k * kTileRows;
      const int64_t rows = std::min<int64_t>(kTileRows, m - tile * kTileRows);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = tile * kTileRows + r;
        if (ta == Trans::kNo) {
          const TA* src = a + row * lda;
          for (int64_t kk = 0; kk < k; ++kk) dst[kk * kTileRows + r] = Widen(src[kk]);
        } else {
          for (int64_t kk = 0; kk < k; ++kk) dst[kk * kTileRows + r] = Widen(a[kk * lda + row]);
        }
      }
    }
  });

  // Rows [r0, r1) x panels [p0, p1): per row block, the partial sums in the thread's buffer
  // through every depth block, then alpha and beta applied once.
  auto work = [&](int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
    std::vector<float>& sums_kept = SumBuffer();
    const int64_t width = (p1 - p0) * kPanel;
    if (sums_kept.size() < static_cast<size_t>(kRowBlock * width)) {
      sums_kept.resize(static_cast<size_t>(kRowBlock * width));
    }
    float* const sums = sums_kept.data();
    for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
      const int64_t rows = std::min(kRowBlock, r1 - rb);
      for (int64_t k0 = 0; k0 < k; k0 += kDepthBlock) {
        const int64_t depth = std::min(kDepthBlock, k - k0);
        for (int64_t p = p0; p < p1; ++p) {
          const float* panel = bp + (p * k + k0) * kPanel;
          float* t = sums + (p - p0) * kPanel;
          for (int64_t r = 0; r < rows; r += kTileRows) {
            const auto tile_rows = static_cast<int>(std::min<int64_t>(kTileRows, rows - r));
            kTiles[tile_rows - 1](ap + ((rb + r) / kTileRows * k + k0) * kTileRows, panel, depth,
                                  k0 == 0, t + r * width, width);
          }
        }
      }
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
  const int64_t row_blocks = (m + kRowBlock - 1) / kRowBlock;
  if (row_blocks >= ComputeThreads()) {
    ParallelFor(row_blocks, 1, [&](int64_t b0, int64_t b1) {
      work(b0 * kRowBlock, std::min(m, b1 * kRowBlock), 0, panels);
    });
  } else {
    ParallelFor(panels, 2, [&](int64_t p0, int64_t p1) { work(0, m, p0, p1); });
  }
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

}  // namespace hypic::cpu

// The oneDNN GEMMs (gpu/cpu/gemm.h) against a float64 product of the same inputs: every
// transpose combination, alpha and beta, row counts on both sides of the row blocks, strided
// operands, bf16 operands, the primitive cache, the bf16 conversion, and RowStableGemm (the fp32
// path of CPUs without AVX-512).
#include "gpu/cpu/gemm.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "gpu/cpu/amx.h"
#include "gpu/cpu/compute_threads.h"
#include "gpu/cpu/row_stable_gemm.h"
#include "tests/support/seeded_rng.h"

#ifdef HYPIC_AMX
#include <immintrin.h>
#endif

namespace hypic::cpu {
namespace {

struct Problem {
  Trans ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
};

// Element (i, j) of op(X) for X stored row-major with leading dimension ld.
double At(const float* x, Trans t, int64_t ld, int64_t i, int64_t j) {
  return t == Trans::kNo ? x[i * ld + j] : x[j * ld + i];
}

// Checks c against alpha op(a) op(b) + beta c0 in float64, within fp32 accumulation error:
// |err| <= 4 (k + 2) eps sum_l |a_il b_lj| + the same for the beta term.
void CheckProduct(const Problem& p, const std::vector<float>& a, const std::vector<float>& b,
                  const std::vector<float>& c0, const std::vector<float>& c) {
  const double eps = std::numeric_limits<float>::epsilon();
  int bad = 0;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t l = 0; l < p.k; ++l) {
        const double x = At(a.data(), p.ta, p.lda, i, l) * At(b.data(), p.tb, p.ldb, l, j);
        ref += x;
        mag += std::abs(x);
      }
      const double old = c0[i * p.ldc + j];
      ref = p.alpha * ref + p.beta * old;
      mag = std::abs(p.alpha) * mag + std::abs(p.beta * old);
      const double tol = 4.0 * static_cast<double>(p.k + 2) * eps * mag + 1e-30;
      if (std::abs(c[i * p.ldc + j] - ref) > tol && ++bad <= 3) {
        FAIL_CHECK("C[", i, ",", j, "] = ", c[i * p.ldc + j], ", want ", ref, " +- ", tol);
      }
    }
  }
  CHECK(bad == 0);
  // Padding between rows is never written.
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = p.n; j < p.ldc; ++j) CHECK(c[i * p.ldc + j] == c0[i * p.ldc + j]);
  }
}

std::vector<float> Operand(testing::SeededRng& rng, Trans t, int64_t rows, int64_t cols,
                           int64_t ld) {
  // Stored as [rows, cols] (kNo) or [cols, rows] (kYes), each stored row ld long.
  const int64_t stored_rows = t == Trans::kNo ? rows : cols;
  return rng.NormalVector(static_cast<size_t>(stored_rows * ld));
}

// A problem with strided operands (lda, ldb, ldc past the rows' widths), random A, B and C.
struct Strided {
  Problem p;
  std::vector<float> a, b, c0;
};

Strided MakeStrided(testing::SeededRng& rng, Trans ta, Trans tb, int64_t m, int64_t n, int64_t k,
                    float alpha, float beta) {
  Strided s;
  s.p = {ta,    tb,    m,   n, k, (ta == Trans::kNo ? k : m) + 5, (tb == Trans::kNo ? n : k) + 1,
         n + 3, alpha, beta};
  s.a = Operand(rng, ta, m, k, s.p.lda);
  s.b = Operand(rng, tb, k, n, s.p.ldb);
  s.c0 = rng.NormalVector(static_cast<size_t>(m * s.p.ldc));
  return s;
}

std::vector<float> RoundedToBf16(const std::vector<float>& x, std::vector<uint16_t>* bits) {
  bits->resize(x.size());
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    (*bits)[i] = F32ToBf16(x[i]);
    out[i] = Bf16ToF32((*bits)[i]);
  }
  return out;
}

TEST_CASE("Gemm matches a float64 product for every transpose, alpha, beta and row count") {
  testing::SeededRng rng(7);
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      for (int64_t m : {1, 15, 16, 37, 512, 530}) {
        for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {-1.0f, 1.0f}, {0.125f, 0.5f}}) {
          for (int64_t n : {24, 136}) {  // dnnl_sgemm, then the primitive path
            const int64_t k = 40;
            const auto [p, a, b, c0] = MakeStrided(rng, ta, tb, m, n, k, alpha, beta);
            auto c = c0;
            Gemm(ta, tb, m, n, k, alpha, a.data(), p.lda, b.data(), p.ldb, beta, c.data(), p.ldc);
            INFO("ta=", int(ta), " tb=", int(tb), " m=", m, " alpha=", alpha, " beta=", beta);
            CheckProduct(p, a, b, c0, c);
            auto any = c0;
            GemmAnyShape(ta, tb, m, n, k, alpha, a.data(), p.lda, b.data(), p.ldb, beta, any.data(),
                         p.ldc);
            CheckProduct(p, a, b, c0, any);
          }
        }
      }
    }
  }
}

TEST_CASE("a row's bits do not depend on how many rows its call has (fp32 and bf16)") {
  // Against nn.Linear-shaped weights: the model relies on it (a last-row-only lm_head equals
  // the all-rows one; a prompt's rows do not change with the rows batched beside them). Rows
  // alone, in a tail of fewer than 16, in a merged rest and in whole groups; A at its own
  // width and inside wider rows (an MLP's down product reads half of each gate-up row: on a
  // Xeon, oneDNN's fp32 kernels summed an 11-row tail in another order there).
  testing::SeededRng rng(9);
  constexpr int64_t m = 530;
  for (auto [n, k, lda] : {std::tuple<int64_t, int64_t, int64_t>{136, 200, 200},
                           {512, 512, 512},
                           {512, 512, 1024},
                           {1024, 512, 1536}}) {
    const auto x = rng.NormalVector(static_cast<size_t>(m * lda));
    const auto w = rng.NormalVector(static_cast<size_t>(n * k));
    std::vector<uint16_t> x16(x.size()), w16(w.size());
    ConvertRowsToBf16(x.data(), lda, m, lda, x16.data(), lda);
    ConvertRowsToBf16(w.data(), k, n, k, w16.data(), k);
    std::vector<float> all(m * n), all16(m * n);
    Gemm(Trans::kNo, Trans::kYes, m, n, k, 1.0f, x.data(), lda, w.data(), k, 0.0f, all.data(), n);
    Gemm(Trans::kNo, Trans::kYes, m, n, k, 1.0f, x16.data(), lda, w16.data(), k, 0.0f, all16.data(),
         n);
    for (auto [row0, rows] : {std::pair<int64_t, int64_t>{529, 1},
                              {0, 1},
                              {64, 11},
                              {7, 37},
                              {3, 59},
                              {200, 48},
                              {100, 300}}) {
      std::vector<float> part(rows * n), part16(rows * n);
      Gemm(Trans::kNo, Trans::kYes, rows, n, k, 1.0f, x.data() + row0 * lda, lda, w.data(), k, 0.0f,
           part.data(), n);
      Gemm(Trans::kNo, Trans::kYes, rows, n, k, 1.0f, x16.data() + row0 * lda, lda, w16.data(), k,
           0.0f, part16.data(), n);
      INFO("n=", n, " k=", k, " lda=", lda, " rows [", row0, ", ", row0 + rows, ")");
      CHECK(std::equal(part.begin(), part.end(), all.begin() + row0 * n));
      CHECK(std::equal(part16.begin(), part16.end(), all16.begin() + row0 * n));
    }
  }
}

TEST_CASE("GemmFewRows: a float64 product's value, beta 0 never reads C, a row's bits whatever m") {
  testing::SeededRng rng(12);
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      // Few rows, or many rows over a short k (a short chunk's K^T V).
      for (auto [m, k] : {std::pair<int64_t, int64_t>{1, 64},
                          {8, 64},
                          {kGemmFewRows - 1, 64},
                          {64, 8},
                          {64, kGemmFewRows - 1}}) {
        for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {-1.0f, 1.0f}, {0.125f, 0.5f}}) {
          for (int64_t n : {8, 64, 136, 83}) {  // tiles of 64, 16 and single columns
            const auto [p, a, b, c0] = MakeStrided(rng, ta, tb, m, n, k, alpha, beta);
            auto c = c0;
            if (beta == 0.0f) {  // what C held must not matter
              for (int64_t i = 0; i < m; ++i) {
                std::fill_n(c.begin() + i * p.ldc, n, std::numeric_limits<float>::quiet_NaN());
              }
            }
            GemmFewRows(ta, tb, m, n, k, alpha, a.data(), p.lda, b.data(), p.ldb, beta, c.data(),
                        p.ldc);
            INFO("ta=", int(ta), " tb=", int(tb), " m=", m, " k=", k, " n=", n, " beta=", beta);
            CheckProduct(p, a, b, c0, c);
            // Row m - 1 alone gets the bits it had among m rows.
            std::vector<float> last(c0.begin() + (m - 1) * p.ldc, c0.begin() + m * p.ldc);
            const float* a_last = ta == Trans::kNo ? a.data() + (m - 1) * p.lda : a.data() + m - 1;
            GemmFewRows(ta, tb, 1, n, k, alpha, a_last, p.lda, b.data(), p.ldb, beta, last.data(),
                        p.ldc);
            CHECK(std::equal(last.begin(), last.begin() + n, c.begin() + (m - 1) * p.ldc));
          }
        }
      }
    }
  }
}

TEST_CASE("small fp32 products (sgemm's): a row's bits whatever its call's rows, A either way") {
  // n, k <= kGemmSmallDim: the chunked linear-attention products, a small model's layers. A
  // call of a few rows (a chunk's tail, a seam, a decode step) equals the same rows of a big one,
  // also where A and C are parts of wider rows (a chunk's Q and K are read in place, a row
  // stride of every key head's features): a call padded to 16 rows keeps those strides.
  testing::SeededRng rng(10);
  constexpr int64_t m = 80, n = 64, k = 64;
  for (auto [lda_no, ldc] : {std::pair<int64_t, int64_t>{k, n}, {4 * k, 3 * n}}) {
    const auto x = rng.NormalVector(static_cast<size_t>(m * lda_no));  // A [m, k] in [m, lda_no]
    const auto w = rng.NormalVector(static_cast<size_t>(n * k));
    const auto c0 = rng.NormalVector(static_cast<size_t>(m * ldc));
    const int64_t lda_t = m + 16;  // A stored transposed, [k, m] in [k, lda_t]
    std::vector<float> xt(static_cast<size_t>(k * lda_t));
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t i = 0; i < k; ++i)
        xt[static_cast<size_t>(i * lda_t + r)] = x[static_cast<size_t>(r * lda_no + i)];
    }
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (float beta : {0.0f, 0.5f}) {
        const float* a = ta == Trans::kNo ? x.data() : xt.data();
        const int64_t lda = ta == Trans::kNo ? lda_no : lda_t;
        std::vector<float> all = c0;
        Gemm(ta, Trans::kYes, m, n, k, 1.5f, a, lda, w.data(), k, beta, all.data(), ldc);
        for (auto [row0, rows] :
             {std::pair<int64_t, int64_t>{79, 1}, {0, 1}, {3, 5}, {60, 15}, {10, 16}, {20, 33}}) {
          std::vector<float> part(c0.begin() + row0 * ldc, c0.begin() + (row0 + rows) * ldc);
          const float* a_rows = ta == Trans::kNo ? a + row0 * lda : a + row0;
          Gemm(ta, Trans::kYes, rows, n, k, 1.5f, a_rows, lda, w.data(), k, beta, part.data(), ldc);
          INFO("ta ", static_cast<int>(ta), " beta ", beta, " lda ", lda, " ldc ", ldc, " rows [",
               row0, ", ", row0 + rows, ")");
          for (int64_t r = 0; r < rows; ++r) {
            CHECK(std::equal(part.begin() + r * ldc, part.begin() + r * ldc + n,
                             all.begin() + (row0 + r) * ldc));
          }
        }
      }
    }
  }
}

TEST_CASE("RowStableGemm: a float64 product's value, a row's bits whatever the call, bf16 exact") {
  // It is the fp32 path only on CPUs without AVX-512; tested directly on every CPU.
  testing::SeededRng rng(13);
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      // Rows across its 6-row tiles and 48-row blocks, columns across its 16-column panels,
      // depths across its 256-deep passes.
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                             {7, 17, 255},
                             {50, 40, 257},
                             {61, 96, 513},
                             {101, 136, 600}}) {
        for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {0.125f, 0.5f}}) {
          const auto [p, a, b, c0] = MakeStrided(rng, ta, tb, m, n, k, alpha, beta);
          INFO("ta=", int(ta), " tb=", int(tb), " m=", m, " n=", n, " k=", k, " beta=", beta);
          auto all = c0;
          RowStableGemm(ta, tb, m, n, k, alpha, a.data(), p.lda, b.data(), p.ldb, beta, all.data(),
                        p.ldc);
          CheckProduct(p, a, b, c0, all);
          // One thread, and each row alone: the same bits.
          auto one = c0;
          {
            ScopedComputeThreads single(1);
            RowStableGemm(ta, tb, m, n, k, alpha, a.data(), p.lda, b.data(), p.ldb, beta,
                          one.data(), p.ldc);
          }
          CHECK(one == all);
          // bf16 operands: widened exactly as they are packed, so the bits of the fp32 call on
          // the rounded values.
          std::vector<uint16_t> a16, b16;
          const auto ar32 = RoundedToBf16(a, &a16), br32 = RoundedToBf16(b, &b16);
          auto want16 = c0, got16 = c0;
          RowStableGemm(ta, tb, m, n, k, alpha, ar32.data(), p.lda, br32.data(), p.ldb, beta,
                        want16.data(), p.ldc);
          RowStableGemm(ta, tb, m, n, k, alpha, a16.data(), p.lda, b16.data(), p.ldb, beta,
                        got16.data(), p.ldc);
          CHECK(std::memcmp(got16.data(), want16.data(), got16.size() * sizeof(float)) == 0);
          for (int64_t r : {int64_t{0}, m / 2, m - 1}) {
            std::vector<float> row(c0.begin() + r * p.ldc, c0.begin() + (r + 1) * p.ldc);
            const float* ar = ta == Trans::kNo ? a.data() + r * p.lda : a.data() + r;
            RowStableGemm(ta, tb, 1, n, k, alpha, ar, p.lda, b.data(), p.ldb, beta, row.data(),
                          p.ldc);
            CHECK(std::memcmp(row.data(), all.data() + r * p.ldc,
                              static_cast<size_t>(n) * sizeof(float)) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("RowStableGemm: a column's bits do not depend on the call's other columns") {
  // C = A B over whole 16-column panels keeps its partial sums in C itself; one more column
  // takes the buffer path. Both give the same bits for the shared columns, and C's columns
  // past n are not touched.
  testing::SeededRng rng(19);
  constexpr int64_t m = 53, n = 64, k = 300, ldb = n + 1, ldc = n + 7;
  const auto a = rng.NormalVector(static_cast<size_t>(m * k));
  const auto b = rng.NormalVector(static_cast<size_t>(k * ldb));
  const auto c0 = rng.NormalVector(static_cast<size_t>(m * ldc));
  auto whole = c0, wider = c0;
  RowStableGemm(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, b.data(), ldb, 0.0f,
                whole.data(), ldc);
  RowStableGemm(Trans::kNo, Trans::kNo, m, n + 1, k, 1.0f, a.data(), k, b.data(), ldb, 0.0f,
                wider.data(), ldc);
  for (int64_t r = 0; r < m; ++r) {
    CAPTURE(r);
    CHECK(std::memcmp(whole.data() + r * ldc, wider.data() + r * ldc, n * sizeof(float)) == 0);
    CHECK(std::memcmp(whole.data() + r * ldc + n, c0.data() + r * ldc + n,
                      (ldc - n) * sizeof(float)) == 0);
  }
}

TEST_CASE("RowStableGemm: each element is one FMA chain over k, in order, on every tile path") {
#if defined(__FMA__)
  // The property the runtime's bits rest on, against std::fmaf written out: 8-lane tiles of one
  // panel, and (AVX-512 builds) 16-lane tiles of two, with a lone last panel beside them (n 48:
  // three panels), a partial one (n 40), rows that end mid-tile, depths across 256-deep passes,
  // fp32 and bf16 weights (widened in blocks below 192 rows, whole above), 1 and 2 threads.
  testing::SeededRng rng(37);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{13, 48, 300},
                         {40, 40, 64},
                         {200, 96, 520},
                         {7, 128, 17}}) {
    const auto a = rng.NormalVector(static_cast<size_t>(m * k));
    std::vector<uint16_t> w16;
    const auto w = RoundedToBf16(rng.NormalVector(static_cast<size_t>(n * k)), &w16);
    std::vector<float> want(static_cast<size_t>(m * n));
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (int64_t kk = 0; kk < k; ++kk) acc = std::fmaf(a[r * k + kk], w[j * k + kk], acc);
        want[static_cast<size_t>(r * n + j)] = acc;
      }
    }
    std::vector<uint16_t> panels(static_cast<size_t>(RowStablePanelElements(n, k)));
    PackRowStablePanels(w16.data(), n, k, panels.data());
    // A rounded to bf16 by the panels' product: its chain runs on the rounded A.
    std::vector<uint16_t> ar16;
    const auto ar = RoundedToBf16(a, &ar16);
    for (int threads : {1, 2}) {
      ScopedComputeThreads budget(threads);
      INFO("m=", m, " n=", n, " k=", k, " threads=", threads);
      std::vector<float> got(want.size(), std::numeric_limits<float>::quiet_NaN());
      RowStableGemm(Trans::kNo, Trans::kYes, m, n, k, 1.0f, a.data(), k, w.data(), k, 0.0f,
                    got.data(), n);
      CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
      std::vector<float> from_panels(want.size(), std::numeric_limits<float>::quiet_NaN());
      RowStableGemmPanelsRoundingA(m, n, k, 1.0f, a.data(), k, panels.data(), 0.0f,
                                   from_panels.data(), n);
      int64_t differ = 0;
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          float acc = 0.0f;
          for (int64_t kk = 0; kk < k; ++kk) acc = std::fmaf(ar[r * k + kk], w[j * k + kk], acc);
          differ += std::memcmp(&acc, &from_panels[static_cast<size_t>(r * n + j)], 4) != 0;
        }
      }
      CHECK(differ == 0);
    }
  }
#else
  MESSAGE("skipped: this build has no FMA, so the tiles round each product and sum apart");
#endif
}

TEST_CASE("PackRowStablePanelsF32 lays op(B) out as panels of 16 columns, zero past n") {
  // The fused attention's K^T (kYes: op(B)[kk][j] = B[j][kk]) and V (kNo); n = 40 leaves a
  // part-filled panel.
  testing::SeededRng rng(17);
  constexpr int64_t rows = 100, cols = 40, ld = 56;
  const auto b = rng.NormalVector(static_cast<size_t>(rows * ld));
  for (Trans tb : {Trans::kYes, Trans::kNo}) {
    const int64_t n = tb == Trans::kYes ? rows : cols, k = tb == Trans::kYes ? cols : rows;
    CAPTURE(n);
    std::vector<float> panels(static_cast<size_t>(RowStablePanelElements(n, k)), 1e30f);
    REQUIRE(panels.size() == static_cast<size_t>((n + 15) / 16 * 16 * k));
    PackRowStablePanelsF32(tb, n, k, b.data(), ld, panels.data());
    int64_t wrong = 0;
    for (int64_t p = 0; p * 16 < n; ++p) {
      for (int64_t kk = 0; kk < k; ++kk) {
        for (int64_t j = 0; j < 16; ++j) {
          const int64_t col = p * 16 + j;
          const float want =
              col >= n ? 0.0f : (tb == Trans::kYes ? b[col * ld + kk] : b[kk * ld + col]);
          wrong += panels[static_cast<size_t>((p * k + kk) * 16 + j)] != want;
        }
      }
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("bf16 Gemm accumulates the rounded operands in fp32") {
  testing::SeededRng rng(11);
  for (int64_t m : {1, 17, 600}) {
    for (float beta : {0.0f, 1.0f}) {
      const int64_t n = 96, k = 130;
      Problem p{Trans::kNo, Trans::kYes, m, n, k, k, k, n, 1.0f, beta};
      std::vector<uint16_t> a16, b16;
      const auto a = RoundedToBf16(rng.NormalVector(static_cast<size_t>(m * k)), &a16);
      const auto b = RoundedToBf16(rng.NormalVector(static_cast<size_t>(n * k)), &b16);
      const auto c0 = rng.NormalVector(static_cast<size_t>(m * n));
      auto c = c0;
      Gemm(p.ta, p.tb, m, n, k, 1.0f, a16.data(), k, b16.data(), k, beta, c.data(), n);
      INFO("m=", m, " beta=", beta);
      CheckProduct(p, a, b, c0, c);
    }
  }
}

TEST_CASE("a packed bf16 weight gives the plain layout's product and unpacks exactly") {
  // GemmRoundingA too, from the fp32 activations.
  // The shapes of the model's projections (k 512, n from the router's 8 to a fused 1552) and
  // odd ones the layout pads; row counts on both sides of the row blocks, a lone row, beta.
  testing::SeededRng rng(13);
  for (auto [n, k] :
       {std::pair<int64_t, int64_t>{8, 512}, {1552, 512}, {512, 256}, {136, 200}, {33, 70}}) {
    const auto w = rng.NormalVector(static_cast<size_t>(n * k));
    std::vector<uint16_t> w16(w.size());
    ConvertRowsToBf16(w.data(), k, n, k, w16.data(), k);
    const PackedBf16Weight packed(w16.data(), n, k);
    CHECK(packed.n() == n);
    CHECK(packed.k() == k);
    CHECK(packed.bytes() >= w16.size() * sizeof(uint16_t));
    std::vector<uint16_t> back(w16.size(), 0xFFFF);
    packed.Unpack(back.data());
    CHECK(back == w16);
    for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{15}, int64_t{100}, kGemmRowBlock + 37}) {
      // The layout was chosen under the default budget; products run under others too.
      const int threads = m % 2 == 0 ? 1 : 2;
      ScopedComputeThreads budget(threads);
      for (float beta : {0.0f, 1.0f}) {
        const auto x = rng.NormalVector(static_cast<size_t>(m * k));
        std::vector<uint16_t> x16(x.size());
        ConvertRowsToBf16(x.data(), k, m, k, x16.data(), k);
        const auto c0 = rng.NormalVector(static_cast<size_t>(m * n));
        auto plain = c0, blocked = c0;
        Gemm(Trans::kNo, Trans::kYes, m, n, k, 0.5f, x16.data(), k, w16.data(), k, beta,
             plain.data(), n);
        Gemm(m, 0.5f, x16.data(), k, packed, beta, blocked.data(), n);
        INFO("n=", n, " k=", k, " m=", m, " beta=", beta, " threads=", threads);
        CHECK(blocked == plain);
        // fp32 activations rounded by the product itself: the same bits.
        auto rounding = c0;
        AlignedVector<uint16_t> scratch;
        GemmRoundingA(m, 0.5f, x.data(), k, packed, beta, rounding.data(), n, &scratch);
        CHECK(std::memcmp(rounding.data(), blocked.data(), rounding.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("packed-weight products: AMX tiles where the CPU has them, a row's bits whatever m") {
  // Dense products (alpha 1, beta 0) run on AmxGemmRows, read in oneDNN's layout, at any m:
  // the columns split over the threads up to kAmxPanelRows rows, panels of rows beyond, a
  // partial last group of 16 padded. Each row must come out with the same bits in every call,
  // and with oneDNN's own (its plain-layout product) where those hold across call sizes
  // (k <= 1,024 on AMX: at 2,048 its big calls sum in another order). Without AMX every product
  // runs on oneDNN's AVX512-BF16 kernels (row-stable at each shape here, and equal to the plain
  // layout's: measured on the Xeon capped to AVX512_CORE_BF16, as a Zen 4/5 runs them) or, on
  // a CPU without bf16 instructions, on RowStableGemm; the same checks hold. Shapes: 16 whole
  // column blocks; a last block of 16 columns (1552); three column tiles (one pair and one
  // alone); columns that end inside a tile (8: one partial tile, at k 512 and 2,048; 40: a
  // pair and a partial one; 24: a pair with a partial second); k of 2 to 64 depth blocks. With
  // strided A or C (where oneDNN sums in another order) the product stays on oneDNN, a row's
  // bits the same in a smaller call, and C's padding untouched.
  testing::SeededRng rng(29);
  const bool amx = AmxUsable() && DescribeGemm().bf16_native;
  if (!amx) MESSAGE("no AMX here (", GemmSummary(), "): every product below runs without it");
  CHECK(DescribeGemm().bf16_packed_amx == amx);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{1024, 512},
                      {1552, 512},
                      {48, 1024},
                      {96, 64},
                      {256, 2048},
                      {8, 512},
                      {8, 2048},
                      {40, 512},
                      {24, 64}}) {
    std::vector<uint16_t> w16, x16;
    RoundedToBf16(rng.NormalVector(static_cast<size_t>(n * k)), &w16);
    const PackedBf16Weight packed(w16.data(), n, k);
    CHECK(packed.amx_blocked().has_value() == amx);
    // Dense: 600 rows are panels of 256, 256 and 80 rows and a padded group of 8.
    constexpr int64_t big = 600;
    RoundedToBf16(rng.NormalVector(static_cast<size_t>(big * k)), &x16);
    std::vector<float> all(static_cast<size_t>(big * n));
    uint64_t calls = AmxGemmCalls();
    Gemm(big, 1.0f, x16.data(), k, packed, 0.0f, all.data(), n);
    CHECK(AmxGemmCalls() == calls + (amx ? 2 : 0));
    if (k <= 1024 || !amx) {
      std::vector<float> plain(all.size());
      Gemm(Trans::kNo, Trans::kYes, big, n, k, 1.0f, x16.data(), k, w16.data(), k, 0.0f,
           plain.data(), n);
      // With a partial column tile oneDNN sums a call of one group of 16 rows (its padded
      // tail here) in another order than its bigger ones: those rows are not compared.
      const int64_t rows = n % 16 == 0 ? big : big / 16 * 16;
      INFO("n=", n, " k=", k);
      CHECK(std::memcmp(all.data(), plain.data(), static_cast<size_t>(rows * n) * sizeof(float)) ==
            0);
    }
    for (int64_t m : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{40}, kAmxPanelRows,
                      kAmxPanelRows + 16, int64_t{300}, int64_t{520}}) {
      for (int threads : {1, 2}) {
        ScopedComputeThreads budget(threads);
        const int64_t row0 = (big - m) / 3;
        std::vector<float> c(static_cast<size_t>(m * n), std::numeric_limits<float>::quiet_NaN());
        calls = AmxGemmCalls();
        Gemm(m, 1.0f, x16.data() + row0 * k, k, packed, 0.0f, c.data(), n);
        INFO("n=", n, " k=", k, " m=", m, " threads=", threads);
        CHECK(AmxGemmCalls() == calls + (amx ? (m > kAmxPanelRows && m % 16 != 0 ? 2 : 1) : 0));
        CHECK(std::memcmp(c.data(), all.data() + row0 * n, c.size() * sizeof(float)) == 0);
      }
    }
    // Strided: on oneDNN, against its call of 288 rows.
    const int64_t lda = k + 32, ldc = n + 3, strided_big = 288;
    RoundedToBf16(rng.NormalVector(static_cast<size_t>(strided_big * lda)), &x16);
    std::vector<float> reference(static_cast<size_t>(strided_big * ldc));
    Gemm(strided_big, 1.0f, x16.data(), lda, packed, 0.0f, reference.data(), ldc);
    for (int64_t m : {int64_t{1}, int64_t{15}, int64_t{40}, int64_t{256}}) {
      std::vector<float> c(static_cast<size_t>(m * ldc), std::numeric_limits<float>::quiet_NaN());
      c[static_cast<size_t>(n)] = 7.0f;  // row 0's padding
      calls = AmxGemmCalls();
      Gemm(m, 1.0f, x16.data(), lda, packed, 0.0f, c.data(), ldc);
      INFO("strided: n=", n, " k=", k, " m=", m);
      CHECK(AmxGemmCalls() == calls);
      int64_t differ = 0;
      for (int64_t r = 0; r < m; ++r) {
        differ += std::memcmp(c.data() + r * ldc, reference.data() + r * ldc,
                              static_cast<size_t>(n) * sizeof(float)) != 0;
      }
      CHECK(differ == 0);
      CHECK(c[static_cast<size_t>(n)] == 7.0f);
    }
  }
}

TEST_CASE("oneDNN's ISA cap (ONEDNN_MAX_CPU_ISA) reaches hypic's own kernels") {
  // The *_isa_<tier> ctest runs (tests/gpu/CMakeLists.txt) set the cap to run a lower tier's
  // paths on this machine: they test that tier only if every kernel of ours obeys it too.
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (cap == nullptr) {
    MESSAGE("skipped: no ISA cap set (", GemmSummary(), ")");
    return;
  }
  const std::string tier = cap;
  MESSAGE("ONEDNN_MAX_CPU_ISA=", tier, ": ", GemmSummary());
  const GemmInfo& info = DescribeGemm();
  const bool below_amx = tier == "AVX512_CORE_BF16" || tier == "AVX512_CORE" || tier == "AVX2";
  if (below_amx) {
    CHECK_FALSE(AmxUsable());
    CHECK_FALSE(info.bf16_packed_amx);
  }
  // No bf16 instructions: bf16 products widen to fp32 on RowStableGemm, as do fp32 ones on AVX2.
  if (tier == "AVX512_CORE" || tier == "AVX2") CHECK_FALSE(info.bf16_native);
  if (tier == "AVX2") CHECK_FALSE(info.f32_onednn);
}

#ifdef HYPIC_AMX
// Tile 0 zeroed and stored as 16 x 16 floats: a tile instruction of the caller's own.
[[gnu::target("amx-tile")]] void StoreZeroTile(float* out) {
  _tile_zero(0);
  _tile_stored(0, out, 64);
}
#endif

TEST_CASE("AMX tile scopes nest: a product inside a held scope leaves the tiles configured") {
#ifdef HYPIC_AMX
  if (!AmxUsable()) {
    MESSAGE("skipped: no AMX here (", GemmSummary(), ")");
    return;
  }
  // A kernel that holds the tiles (the attention) may run a product that takes them too: the
  // inner scope must neither reconfigure nor release them, or the outer kernel's next tile
  // instruction faults. Two products in one held scope, then after it, the same bits.
  testing::SeededRng rng(31);
  constexpr int64_t m = 16, n = 64, k = 64;
  std::vector<uint16_t> w16, x16;
  RoundedToBf16(rng.NormalVector(static_cast<size_t>(n * k)), &w16);
  RoundedToBf16(rng.NormalVector(static_cast<size_t>(m * k)), &x16);
  const PackedBf16Weight packed(w16.data(), n, k);
  REQUIRE(packed.amx_blocked().has_value());
  ScopedComputeThreads one(1);
  std::vector<float> alone(m * n), first(m * n), second(m * n);
  Gemm(m, 1.0f, x16.data(), k, packed, 0.0f, alone.data(), n);
  std::vector<float> zeros(16 * 16, 1.0f);
  {
    const ScopedTiles held;
    Gemm(m, 1.0f, x16.data(), k, packed, 0.0f, first.data(), n);
    Gemm(m, 1.0f, x16.data(), k, packed, 0.0f, second.data(), n);
    StoreZeroTile(zeros.data());  // faults (SIGILL) if the products released the tiles
  }
  CHECK(first == alone);
  CHECK(second == alone);
  CHECK(zeros == std::vector<float>(16 * 16, 0.0f));
#else
  MESSAGE("skipped: this build has no AMX kernels");
#endif
}

TEST_CASE("rounding A inside the product rounds as F32ToBf16: ties to even, carries") {
  // W = I, so C is the rounded A itself (normal values: a ParallelFor flushes subnormals); 12 rows
  // (two whole 6-row tiles, the 8-lane path) and 20 columns (a tail of 4).
  constexpr int64_t m = 12, n = 20, k = 20;
  const uint32_t patterns[] = {0x3F808000u, 0x3F818000u, 0x3FFFFFFFu, 0xBFFFFFFFu, 0x40008000u,
                               0x40018000u, 0x7F7E7FFFu, 0x3F800001u, 0x3F807FFFu, 0xC2F6E979u};
  std::vector<float> a(static_cast<size_t>(m * k));
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = F32FromBits(patterns[i % std::size(patterns)] + static_cast<uint32_t>(i / 97));
  }
  std::vector<uint16_t> identity(static_cast<size_t>(n * k), 0);
  for (int64_t i = 0; i < n; ++i) identity[static_cast<size_t>(i * k + i)] = F32ToBf16(1.0f);
  std::vector<uint16_t> panels(static_cast<size_t>(RowStablePanelElements(n, k)));
  PackRowStablePanels(identity.data(), n, k, panels.data());
  std::vector<float> c(static_cast<size_t>(m * n), -1.0f);
  RowStableGemmPanelsRoundingA(m, n, k, 1.0f, a.data(), k, panels.data(), 0.0f, c.data(), n);
  int64_t wrong = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    wrong += F32Bits(c[i]) != F32Bits(Bf16ToF32(F32ToBf16(a[i])));
  }
  CHECK(wrong == 0);
}

TEST_CASE("k = 0 scales C by beta; empty products touch nothing") {
  const float* none = nullptr;
  std::vector<float> c{1, 2, 3, 4};
  Gemm(Trans::kNo, Trans::kNo, 2, 2, 0, 1.0f, none, 1, none, 2, 0.5f, c.data(), 2);
  CHECK(c == std::vector<float>{0.5f, 1, 1.5f, 2});
  Gemm(Trans::kNo, Trans::kNo, 2, 2, 0, 1.0f, none, 1, none, 2, 0.0f, c.data(), 2);
  CHECK(c == std::vector<float>{0, 0, 0, 0});
  c = {1, 2, 3, 4};
  Gemm(Trans::kNo, Trans::kNo, 0, 2, 3, 1.0f, none, 3, none, 2, 0.0f, c.data(), 2);
  CHECK(c == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("a shape builds its primitive once; budgets get their own") {
  if (!DescribeGemm().f32_onednn) {
    MESSAGE("skipped: fp32 products run on RowStableGemm on this CPU (", GemmSummary(),
            "), which builds no primitives");
    return;
  }
  constexpr int64_t m = 145, n = 288, k = 96;  // n above kGemmSmallDim
  static_assert(n > kGemmSmallDim);
  std::vector<float> a(m * k, 1.0f), b(k * n, 1.0f), c(m * n);
  auto run = [&] {
    Gemm(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  };
  ScopedComputeThreads one(1);
  run();  // 145 rows: a 144-row block and a 1-row tail
  const GemmCacheStats first = GemmCacheCounters();
  run();
  const GemmCacheStats second = GemmCacheCounters();
  CHECK(second.built == first.built);
  CHECK(second.hits == first.hits + 2);
  for (float x : c) CHECK(x == static_cast<float>(k));
  {
    ScopedComputeThreads two(2);
    run();
  }
  CHECK(GemmCacheCounters().built == second.built + 2);
  // Small fp32 products build nothing.
  std::vector<float> small(16 * 16, 1.0f), out(16 * 16);
  Gemm(Trans::kNo, Trans::kNo, 16, 16, 16, 1.0f, small.data(), 16, small.data(), 16, 0.0f,
       out.data(), 16);
  CHECK(GemmCacheCounters().built == second.built + 2);
}

TEST_CASE("threads running different products at once each get their own bits") {
  // Every thread cycles through products of its own (transposed operands need oneDNN's
  // scratch memory), first all threads at once, then each alone; the bits must agree. (The
  // chunked forward's head threads are what showed library-managed scratchpads corrupting
  // concurrent calls, gemm.cpp; this checks the contract directly.)
  constexpr int kThreads = 4;
  struct Product {
    Trans ta, tb;
    int64_t m, n, k;
    std::vector<float> a, b;
  };
  testing::SeededRng rng(5);
  std::vector<std::vector<Product>> work(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < 4; ++i) {
      const Trans ta = (t + i) % 2 == 1 ? Trans::kYes : Trans::kNo;
      const Trans tb = (t + i) % 3 == 1 ? Trans::kYes : Trans::kNo;
      Product p{ta, tb, 17 + 13 * t + 7 * i, 33 + 8 * i, 61 - 4 * t + 9 * i, {}, {}};
      p.a = rng.NormalVector(static_cast<size_t>(p.m * p.k));
      p.b = rng.NormalVector(static_cast<size_t>(p.k * p.n));
      work[static_cast<size_t>(t)].push_back(std::move(p));
    }
  }
  using Outputs = std::vector<std::vector<float>>;
  auto run = [](const std::vector<Product>& products, Outputs* out) {
    ScopedComputeThreads one(1);
    out->assign(products.size(), {});
    for (int rep = 0; rep < 20; ++rep) {
      for (size_t i = 0; i < products.size(); ++i) {
        const Product& p = products[i];
        (*out)[i].assign(static_cast<size_t>(p.m * p.n), 0.0f);
        const int64_t lda = p.ta == Trans::kNo ? p.k : p.m, ldb = p.tb == Trans::kNo ? p.n : p.k;
        Gemm(p.ta, p.tb, p.m, p.n, p.k, 1.0f, p.a.data(), lda, p.b.data(), ldb, 0.0f,
             (*out)[i].data(), p.n);
      }
    }
  };
  std::vector<Outputs> together(kThreads), alone(kThreads), pooled(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back(
        [&, t] { run(work[static_cast<size_t>(t)], &together[static_cast<size_t>(t)]); });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t)
    run(work[static_cast<size_t>(t)], &alone[static_cast<size_t>(t)]);
  // Likewise on ParallelFor's (OpenMP) threads.
  ScopedComputeThreads budget(kThreads);
  ParallelFor(kThreads, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      run(work[static_cast<size_t>(t)], &pooled[static_cast<size_t>(t)]);
  });
  for (int t = 0; t < kThreads; ++t) {
    CHECK(together[static_cast<size_t>(t)] == alone[static_cast<size_t>(t)]);
    CHECK(pooled[static_cast<size_t>(t)] == alone[static_cast<size_t>(t)]);
  }
}

TEST_CASE("ConvertRowsToBf16 rounds as F32ToBf16 does, rows strided") {
  testing::SeededRng rng(3);
  constexpr int64_t rows = 3, cols = 45, lds = 50, ldd = 47;
  std::vector<float> src(rows * lds);
  for (float& x : src) x = rng.Normal(0.0f, 100.0f);
  // Ties both ways, the largest finite value, infinities and a signalling NaN.
  const uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f800000u,
                               0xff800000u, 0x7f800001u, 0x00000000u, 0x80000000u};
  for (size_t i = 0; i < std::size(specials); ++i) src[i] = F32FromBits(specials[i]);
  std::vector<uint16_t> dst(rows * ldd, 0xabcd);
  ConvertRowsToBf16(src.data(), lds, rows, cols, dst.data(), ldd);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      INFO("r=", r, " j=", j, " x=", src[r * lds + j]);
      CHECK(dst[r * ldd + j] == F32ToBf16(src[r * lds + j]));
    }
    for (int64_t j = cols; j < ldd; ++j) CHECK(dst[r * ldd + j] == 0xabcd);
  }
}

TEST_CASE("DescribeGemm names the library and its kernels") {
  const GemmInfo& info = DescribeGemm();
  CHECK(info.library.rfind("onednn ", 0) == 0);
  CHECK(!info.f32_kernel.empty());
  CHECK(!info.bf16_kernel.empty());
  CHECK(GemmSummary().find(info.f32_kernel) != std::string::npos);
}

}  // namespace
}  // namespace hypic::cpu

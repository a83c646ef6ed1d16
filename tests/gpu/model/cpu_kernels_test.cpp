// CpuForwardKernels steps against plain float64 loops: RoutedExperts in both of its regimes
// (few rows per expert: experts side by side; many: one after another with the whole budget),
// fp32 and bf16 weights, at a 2-thread budget; AddRmsNorm against Add and RmsNorm; the tiled
// SwiGluMlp against the default's whole-rows Gemm, SwiGlu, Gemm and at 1 and 2 threads;
// SharedExpert against SwiGluMlp then the gated sum;
// RopeRows against ApplyRope on a copy and against the rotation written out per pair, and
// RopeRowsToBf16 against RopeRows then the rounding;
// GdnConvInputsBlocks against the default's GdnConvInputs block by block; LinearSteps against
// the default's steps one by one.
#include "gpu/model/cpu_kernels.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gpu/cpu/compute_threads.h"
#include "gpu/cpu/gemm.h"
#include "tests/support/seeded_rng.h"

namespace hypic::model {
namespace {

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

TEST_CASE("RoutedExperts equals the experts run one by one, few rows or many, f32 or bf16") {
  constexpr int64_t hidden = 48, im = 40, experts = 4, top = 2;
  for (int64_t rows : {9, 700}) {  // 18 and 1400 routed rows: both regimes
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      CAPTURE(rows);
      CAPTURE(DTypeName(dtype));
      testing::SeededRng rng(static_cast<uint64_t>(rows) + static_cast<uint64_t>(dtype));
      const auto x = rng.NormalVector(static_cast<size_t>(rows * hidden));
      std::vector<std::vector<float>> gu(experts), down(experts);
      std::vector<std::vector<uint16_t>> gu16(experts), down16(experts);
      std::vector<std::vector<int64_t>> idx(experts);
      std::vector<std::vector<float>> wgt(experts);
      for (int64_t e = 0; e < experts; ++e) {
        gu[e] = rng.NormalVector(static_cast<size_t>(2 * im * hidden), 0.2f);
        down[e] = rng.NormalVector(static_cast<size_t>(hidden * im), 0.2f);
        for (auto* v : {&gu[e], &down[e]}) {
          if (dtype == DType::kBF16) {  // the reference sees the rounded weights
            for (float& f : *v) f = Bf16ToF32(F32ToBf16(f));
          }
        }
        gu16[e].resize(gu[e].size());
        down16[e].resize(down[e].size());
        for (size_t i = 0; i < gu[e].size(); ++i) gu16[e][i] = F32ToBf16(gu[e][i]);
        for (size_t i = 0; i < down[e].size(); ++i) down16[e][i] = F32ToBf16(down[e][i]);
      }
      for (int64_t r = 0; r < rows; ++r) {  // rows to experts r % E and (r + 1) % E
        for (int64_t t = 0; t < top; ++t) {
          const int64_t e = (r + t) % experts;
          idx[e].push_back(r);
          wgt[e].push_back(0.25f + 0.5f * static_cast<float>(t));
        }
      }
      std::vector<ExpertWork> work;
      for (int64_t e = 0; e < experts; ++e) {
        const DeviceWeight g = dtype == DType::kBF16 ? DeviceWeight(dtype, gu16[e].data())
                                                     : DeviceWeight(gu[e].data());
        const DeviceWeight d = dtype == DType::kBF16 ? DeviceWeight(dtype, down16[e].data())
                                                     : DeviceWeight(down[e].data());
        work.push_back({g, d, im, idx[e], wgt[e]});
      }
      std::vector<float> y(static_cast<size_t>(rows * hidden), 0.0f);
      {
        cpu::ScopedComputeThreads budget(2);
        CpuForwardKernels k;
        k.RoutedExperts(x.data(), nullptr, work, hidden, rows, y.data(), /*accumulate=*/true);
        // Overwriting (garbage in y) gives the bits of accumulating onto zeros, and so does
        // reading x's Bf16Rows instead of rounding the gathered rows again.
        std::vector<float> fresh(y.size(), 123.0f);
        const uint16_t* x16 = k.Bf16Rows(x.data(), hidden, rows, hidden);
        k.RoutedExperts(x.data(), x16, work, hidden, rows, fresh.data(), /*accumulate=*/false);
        CHECK(fresh == y);
      }
      // float64 reference; bf16 also rounds the activations entering each GEMM.
      auto act = [&](double v) {
        return dtype == DType::kBF16 ? Bf16ToF32(F32ToBf16(static_cast<float>(v))) : v;
      };
      double worst = 0.0, scale = 0.0;
      std::vector<double> want(y.size(), 0.0);
      for (int64_t e = 0; e < experts; ++e) {
        for (size_t j = 0; j < idx[e].size(); ++j) {
          const float* xr = x.data() + idx[e][j] * hidden;
          std::vector<double> h(static_cast<size_t>(im));
          for (int64_t i = 0; i < im; ++i) {
            double g = 0, u = 0;
            for (int64_t c = 0; c < hidden; ++c) {
              g += act(xr[c]) * gu[e][static_cast<size_t>(i * hidden + c)];
              u += act(xr[c]) * gu[e][static_cast<size_t>((im + i) * hidden + c)];
            }
            h[static_cast<size_t>(i)] = Silu(g) * u;
          }
          for (int64_t c = 0; c < hidden; ++c) {
            double o = 0;
            for (int64_t i = 0; i < im; ++i) {
              o += act(h[static_cast<size_t>(i)]) * down[e][static_cast<size_t>(c * im + i)];
            }
            want[static_cast<size_t>(idx[e][j] * hidden + c)] += wgt[e][j] * o;
          }
        }
      }
      for (size_t i = 0; i < y.size(); ++i) {
        worst = std::max(worst, std::abs(y[i] - want[i]));
        scale = std::max(scale, std::abs(want[i]));
      }
      INFO("max |dy| ", worst, " of ", scale);
      // fp32: summation order only. bf16: the activations' roundings may fall either side of a
      // tie-free boundary differently from float64's exact products (a few bf16 ulps).
      CHECK(worst / scale < (dtype == DType::kBF16 ? 2e-2 : 1e-5));
    }
  }
}

TEST_CASE("AddRmsNorm gives the bits of Add then RmsNorm, and AddRmsNormBf16 those of Bf16Rows") {
  constexpr int64_t rows = 300, dim = 96;
  testing::SeededRng rng(7);
  const auto x0 = rng.NormalVector(static_cast<size_t>(rows * dim));
  const auto y = rng.NormalVector(static_cast<size_t>(rows * dim));
  const auto w = rng.NormalVector(static_cast<size_t>(dim), 0.1f);
  cpu::ScopedComputeThreads budget(2);
  CpuForwardKernels k;
  std::vector<float> x1 = x0, x2 = x0, xn1(x0.size()), xn2(x0.size());
  k.Add(x1.data(), y.data(), rows * dim);
  k.RmsNorm(x1.data(), dim, w.data(), xn1.data(), dim, rows, dim, 1e-6f);
  k.AddRmsNorm(x2.data(), y.data(), w.data(), xn2.data(), rows, dim, 1e-6f);
  CHECK(x1 == x2);
  CHECK(xn1 == xn2);
  CHECK(x1 != x0);

  // The bf16 form: the same x and xn, and xn's Bf16Rows (or none where Bf16Rows gives none).
  std::vector<float> x3 = x0, xn3(x0.size());
  const uint16_t* xn16 =
      k.AddRmsNormBf16(x3.data(), y.data(), w.data(), xn3.data(), rows, dim, 1e-6f);
  CHECK(x3 == x1);
  CHECK(xn3 == xn1);
  const std::vector<uint16_t> got =
      xn16 == nullptr ? std::vector<uint16_t>{} : std::vector<uint16_t>(xn16, xn16 + rows * dim);
  const uint16_t* want16 = k.Bf16Rows(xn1.data(), dim, rows, dim);
  REQUIRE((want16 == nullptr) == got.empty());
  if (want16 != nullptr) CHECK(got == std::vector<uint16_t>(want16, want16 + rows * dim));
}

TEST_CASE("SwiGluMlp's row tiles: the whole-rows product's values, the same bits at any budget") {
  constexpr int64_t hidden = 256, im = 192;  // above kGemmSmallDim: the model's GEMM path
  testing::SeededRng rng(11);
  auto gu = rng.NormalVector(static_cast<size_t>(2 * im * hidden), 0.2f);
  auto down = rng.NormalVector(static_cast<size_t>(hidden * im), 0.2f);
  std::vector<uint16_t> gu16(gu.size()), down16(down.size());
  for (size_t i = 0; i < gu.size(); ++i) gu16[i] = F32ToBf16(gu[i]);
  for (size_t i = 0; i < down.size(); ++i) down16[i] = F32ToBf16(down[i]);
  const cpu::PackedBf16Weight gu_packed(gu16.data(), 2 * im, hidden);
  const cpu::PackedBf16Weight down_packed(down16.data(), hidden, im);
  struct Weights {
    std::string name;
    DeviceWeight gate_up, down;
  };
  const Weights kinds[] = {
      {"f32", DeviceWeight(gu.data()), DeviceWeight(down.data())},
      {"bf16", DeviceWeight(DType::kBF16, gu16.data()), DeviceWeight(DType::kBF16, down16.data())},
      {"bf16 packed", DeviceWeight(DType::kBF16, gu_packed.data(), &gu_packed),
       DeviceWeight(DType::kBF16, down_packed.data(), &down_packed)},
  };
  for (const Weights& w : kinds) {
    // One row, a tile less or more one (two tiles of 33), a few tiles evened out (160: four
    // of 40; 300: six of 50), and many tiles of 64 with a tail.
    for (int64_t rows : {1, 63, 65, 160, 300, 1100}) {
      CAPTURE(w.name);
      CAPTURE(rows);
      const auto x = rng.NormalVector(static_cast<size_t>(rows * hidden));
      cpu::ScopedComputeThreads budget(2);
      CpuForwardKernels k;
      const bool bf16 = w.gate_up.dtype == DType::kBF16;
      const uint16_t* x16 = bf16 ? k.Bf16Rows(x.data(), hidden, rows, hidden) : nullptr;
      std::vector<float> scratch(static_cast<size_t>(rows * 2 * im));
      std::vector<float> want(static_cast<size_t>(rows * hidden), 7.0f), got = want;
      k.ForwardKernels::SwiGluMlp(w.gate_up, w.down, im, x.data(), x16, rows, hidden,
                                  scratch.data(), want.data());
      k.SwiGluMlp(w.gate_up, w.down, im, x.data(), x16, rows, hidden, nullptr, got.data());
      double worst = 0.0, scale = 0.0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
        scale = std::max(scale, std::abs(static_cast<double>(want[i])));
      }
      INFO("max |d| ", worst, " of ", scale);
      // fp32: a row's sums in another order at most. bf16: besides, an activation that rounds
      // to the other bf16 neighbour (2^-8 relative) in one of the im terms of an output.
      CHECK(worst / scale < (bf16 ? 1e-2 : 1e-5));
      {
        cpu::ScopedComputeThreads one(1);
        std::vector<float> single(got.size(), 7.0f);
        k.SwiGluMlp(w.gate_up, w.down, im, x.data(), x16, rows, hidden, nullptr, single.data());
        CHECK(single == got);
      }
      if (x16 != nullptr) {  // rounding x in the tiles instead: the same bits
        std::vector<float> rounded(got.size(), 7.0f);
        k.SwiGluMlp(w.gate_up, w.down, im, x.data(), nullptr, rows, hidden, nullptr,
                    rounded.data());
        CHECK(rounded == got);
      }
    }
  }
}

TEST_CASE("SharedExpert adds the gated SwiGluMlp rows into y, the same bits at any budget") {
  constexpr int64_t hidden = 256, im = 192;
  testing::SeededRng rng(13);
  auto gu = rng.NormalVector(static_cast<size_t>(2 * im * hidden), 0.2f);
  auto down = rng.NormalVector(static_cast<size_t>(hidden * im), 0.2f);
  const auto gate_w = rng.NormalVector(static_cast<size_t>(hidden), 0.1f);
  std::vector<uint16_t> gu16(gu.size()), down16(down.size());
  for (size_t i = 0; i < gu.size(); ++i) gu16[i] = F32ToBf16(gu[i]);
  for (size_t i = 0; i < down.size(); ++i) down16[i] = F32ToBf16(down[i]);
  for (const bool bf16 : {false, true}) {
    const DeviceWeight w_gu =
        bf16 ? DeviceWeight(DType::kBF16, gu16.data()) : DeviceWeight(gu.data());
    const DeviceWeight w_down =
        bf16 ? DeviceWeight(DType::kBF16, down16.data()) : DeviceWeight(down.data());
    // One row, a partial tile, a few tiles evened out, many tiles with a tail.
    for (int64_t rows : {1, 63, 160, 1100}) {
      CAPTURE(bf16);
      CAPTURE(rows);
      const auto x = rng.NormalVector(static_cast<size_t>(rows * hidden));
      const auto y0 = rng.NormalVector(static_cast<size_t>(rows * hidden));  // the routed sum
      CpuForwardKernels k;
      const uint16_t* x16 = bf16 ? k.Bf16Rows(x.data(), hidden, rows, hidden) : nullptr;
      // The unfused steps in float64 over the MLP's own rows: only the gate's and the sum's
      // roundings (and whether they fuse a multiply-add) may differ, an ulp or two.
      std::vector<float> out(static_cast<size_t>(rows * hidden));
      k.SwiGluMlp(w_gu, w_down, im, x.data(), x16, rows, hidden, nullptr, out.data());
      std::vector<float> first;
      for (const int threads : {1, 2}) {
        cpu::ScopedComputeThreads budget(threads);
        std::vector<float> got = y0;
        k.SharedExpert(w_gu, w_down, im, gate_w.data(), x.data(), x16, rows, hidden, nullptr,
                       nullptr, got.data());
        double worst = 0.0;
        for (int64_t r = 0; r < rows; ++r) {
          double dot = 0.0;
          for (int64_t c = 0; c < hidden; ++c) {
            dot += static_cast<double>(x[r * hidden + c]) * gate_w[c];
          }
          const double g = 1.0 / (1.0 + std::exp(-dot));
          for (int64_t c = 0; c < hidden; ++c) {
            const size_t i = static_cast<size_t>(r * hidden + c);
            const double want = y0[i] + g * out[i];
            const double size = std::abs(static_cast<double>(y0[i])) + std::abs(g * out[i]);
            worst = std::max(worst, std::abs(got[i] - want) / size);
          }
        }
        INFO("threads ", threads, ": worst error relative to |y| + |g out| ", worst);
        CHECK(worst < 1e-6);
        if (first.empty()) {
          first = got;
        } else {
          CHECK(got == first);
        }
      }
    }
  }
}

TEST_CASE("SwiGluRowToBf16 gives the bits of SwiGluRow then the bf16 rounding") {
  constexpr int64_t im = 4096 + 7;  // the vector loop and a scalar tail
  testing::SeededRng rng(5);
  std::vector<float> gu = rng.NormalVector(static_cast<size_t>(2 * im), 8.0f);
  const float special[] = {0.0f,
                           -0.0f,
                           87.3f,
                           -87.3f,
                           88.3f,
                           -88.3f,
                           100.0f,
                           -100.0f,
                           1e-30f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  for (size_t i = 0; i < std::size(special); ++i) {
    gu[i] = special[i];                                 // gates
    gu[static_cast<size_t>(im) + 20 + i] = special[i];  // ups
  }
  std::vector<float> row = gu;
  SwiGluRow(row.data(), im);
  std::vector<uint16_t> want(static_cast<size_t>(im)), got(want.size());
  for (int64_t i = 0; i < im; ++i) want[static_cast<size_t>(i)] = F32ToBf16(row[i]);
  SwiGluRowToBf16(gu.data(), im, got.data());
  int differ = 0;
  for (int64_t i = 0; i < im; ++i) {
    if (got[static_cast<size_t>(i)] != want[static_cast<size_t>(i)] && ++differ <= 3) {
      FAIL_CHECK("h[", i, "] of g = ", gu[i], ", u = ", gu[im + i], ": ", got[i], ", want ",
                 want[i]);
    }
  }
  CHECK(differ == 0);
}

TEST_CASE("RopeRows leaves in dst the bits ApplyRope leaves in a copy of src") {
  constexpr int64_t heads = 3, hd = 20, lds = heads * hd + 7, ldd = heads * hd + 3;
  testing::SeededRng rng(23);
  // Positions inside the shared table and past its end (computed row by row).
  for (const int64_t pos0 : {int64_t{0}, int64_t{1} << 24}) {
    for (const int64_t rotary_dim : {int64_t{8}, hd, int64_t{0}}) {
      CAPTURE(pos0);
      CAPTURE(rotary_dim);
      constexpr int64_t rows = 300;  // more than one range of ApplyRope's threads
      const auto src = rng.NormalVector(static_cast<size_t>(rows * lds));
      std::vector<float> want(static_cast<size_t>(rows * ldd), -1.0f), got = want;
      for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(src.begin() + r * lds, heads * hd, want.begin() + r * ldd);
      }
      ApplyRope(want.data(), ldd, rows, heads, hd, rotary_dim, 1e6, pos0);
      RopeRows(src.data(), lds, got.data(), ldd, rows, heads, hd, rotary_dim, 1e6, pos0);
      CHECK(got == want);  // the padding between rows untouched in both
      if (rotary_dim > 0) CHECK(got[5 * ldd + 1] != src[5 * lds + 1]);  // a rotated dim moved
    }
  }
}

TEST_CASE("RoPE's rotation has the same bits in every lane: a c - (b s) and b c + (a s), fused") {
  // half = 28: a 16-lane vector, an 8-lane one and 4 scalar pairs on an AVX-512 build.
  constexpr int64_t hd = 64, rotary_dim = 56, half = rotary_dim / 2, rows = 40;
  constexpr double theta = 1e4;
  testing::SeededRng rng(29);
  const auto src = rng.NormalVector(static_cast<size_t>(rows * hd));
  std::vector<float> got(src.size());
  RopeRows(src.data(), hd, got.data(), hd, rows, 1, hd, rotary_dim, theta, 100);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < half; ++i) {
      CAPTURE(r);
      CAPTURE(i);
      float c = 0, s = 0;
      RopeCosSin(100 + r, RopeInvFreq(theta, i, rotary_dim), &c, &s);
      const float a = src[static_cast<size_t>(r * hd + i)];
      const float b = src[static_cast<size_t>(r * hd + half + i)];
      CHECK(got[static_cast<size_t>(r * hd + i)] == std::fma(a, c, -(b * s)));
      CHECK(got[static_cast<size_t>(r * hd + half + i)] == std::fma(b, c, a * s));
    }
    for (int64_t d = rotary_dim; d < hd; ++d) {
      CHECK(got[static_cast<size_t>(r * hd + d)] == src[static_cast<size_t>(r * hd + d)]);
    }
  }
}

TEST_CASE("RopeRowsToBf16 gives the bits of RopeRows then the bf16 rounding") {
  // rotary 16 and 32: the rotated dims fill whole vectors (the fused AVX-512 path); 8 and 24
  // do not (the two-pass path); 0 rounds only. Head 72: a rest of 16-lane chunks and a tail
  // of 8, rounded by the instruction and by F32ToBf16 as ConvertRowsToBf16 rounds them.
  constexpr int64_t hd = 72, lds = hd + 5, ldd = hd + 3, rows = 50;
  testing::SeededRng rng(31);
  for (const int64_t pos0 : {int64_t{7}, int64_t{1} << 24}) {  // in the table and past it
    for (const int64_t rotary_dim : {16, 32, 8, 24, 0}) {
      CAPTURE(pos0);
      CAPTURE(rotary_dim);
      auto src = rng.NormalVector(static_cast<size_t>(rows * lds));
      // Denormals, zeros of both signs and a NaN, which the two roundings treat differently.
      src[3] = 1e-40f;
      src[static_cast<size_t>(lds + 70)] = -1e-41f;
      src[static_cast<size_t>(2 * lds + 20)] = -0.0f;
      src[static_cast<size_t>(3 * lds + 66)] = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> rotated(static_cast<size_t>(rows * hd));
      RopeRows(src.data(), lds, rotated.data(), hd, rows, 1, hd, rotary_dim, 1e6, pos0);
      std::vector<uint16_t> want(static_cast<size_t>(rows * ldd), 0xFFFF), got = want;
      cpu::ConvertRowsToBf16(rotated.data(), hd, rows, hd, want.data(), ldd);
      RopeRowsToBf16(src.data(), lds, got.data(), ldd, rows, hd, rotary_dim, 1e6, pos0);
      CHECK(got == want);  // the padding between rows untouched in both
    }
  }
}

TEST_CASE("GdnConvInputsBlocks gives the bits of GdnConvInputs block by block") {
  // Blocks as a compose lays them out: seams of a few rows, each after a cached entry whose
  // conv tail it starts from, and a longer suffix; one block continues its predecessor's
  // conv state (start == nullptr), as a live segment after a live block would.
  constexpr int64_t nk = 2, nv = 4, dk = 16, dv = 8, kernel = 4;
  constexpr int64_t ch = 2 * nk * dk + nv * dv, vw = nv * dv, cin = ch + vw + 2 * nv;
  constexpr int64_t tail = (kernel - 1) * ch;
  const std::vector<int64_t> block_rows = {8, 8, 3, 8, 37};
  const std::vector<bool> starts_fresh = {false, true, false, true, true};
  int64_t rows = 0;
  for (int64_t n : block_rows) rows += n;
  testing::SeededRng rng(31);
  const auto proj = rng.NormalVector(static_cast<size_t>(rows * cin));
  const auto conv_weight = rng.NormalVector(static_cast<size_t>(ch * kernel), 0.5f);
  const auto a_log = rng.NormalVector(static_cast<size_t>(nv), 0.5f);
  const auto dt_bias = rng.NormalVector(static_cast<size_t>(nv), 0.5f);
  const auto conv0 = rng.NormalVector(static_cast<size_t>(tail));
  std::vector<std::vector<float>> entry_tails;
  for (size_t i = 0; i < block_rows.size(); ++i) {
    entry_tails.push_back(rng.NormalVector(static_cast<size_t>(tail)));
  }

  struct Outputs {
    std::vector<float> q, k, v, gate, beta, conv;
  };
  auto run = [&](bool batched, int threads) {
    cpu::ScopedComputeThreads budget(threads);
    CpuForwardKernels kernels;
    Outputs out{std::vector<float>(static_cast<size_t>(rows * nk * dk), -1.0f),
                std::vector<float>(static_cast<size_t>(rows * nk * dk), -1.0f),
                std::vector<float>(static_cast<size_t>(rows * vw), -1.0f),
                std::vector<float>(static_cast<size_t>(rows * nv), -1.0f),
                std::vector<float>(static_cast<size_t>(rows * nv), -1.0f),
                conv0};
    std::vector<GdnInputBlock> blocks;
    int64_t r0 = 0;
    for (size_t i = 0; i < block_rows.size(); ++i) {
      blocks.push_back({.args = {.rows = block_rows[i],
                                 .key_heads = nk,
                                 .value_heads = nv,
                                 .dk = dk,
                                 .dv = dv,
                                 .q_scale = 0.25f,
                                 .x = proj.data() + r0 * cin,
                                 .ldx = cin,
                                 .conv_weight = conv_weight.data(),
                                 .conv_kernel = kernel,
                                 .conv_state = out.conv.data(),
                                 .ba = proj.data() + r0 * cin + ch + vw,
                                 .ld_ba = cin,
                                 .a_log = a_log.data(),
                                 .dt_bias = dt_bias.data(),
                                 .q = out.q.data() + r0 * nk * dk,
                                 .k = out.k.data() + r0 * nk * dk,
                                 .v = out.v.data() + r0 * vw,
                                 .gate = out.gate.data() + r0 * nv,
                                 .beta = out.beta.data() + r0 * nv},
                        .start = starts_fresh[i] ? entry_tails[i].data() : nullptr});
      r0 += block_rows[i];
    }
    if (batched) {
      kernels.GdnConvInputsBlocks(blocks);
    } else {
      kernels.ForwardKernels::GdnConvInputsBlocks(blocks);  // GdnConvInputs one by one
    }
    REQUIRE(kernels.status().ok());
    return out;
  };
  const Outputs want = run(false, 1);
  CHECK(want.conv != conv0);
  CHECK(std::none_of(want.q.begin(), want.q.end(), [](float x) { return x == -1.0f; }));
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    const Outputs got = run(true, threads);
    CHECK(got.q == want.q);
    CHECK(got.k == want.k);
    CHECK(got.v == want.v);
    CHECK(got.gate == want.gate);
    CHECK(got.beta == want.beta);
    CHECK(got.conv == want.conv);
  }
  // The blocks' own conv states matter: the same rows as one block agree on the first block
  // and differ on the second's first K-1 rows, whose left context is an entry's tail there.
  const Outputs whole = [&] {
    cpu::ScopedComputeThreads budget(1);
    CpuForwardKernels kernels;
    Outputs out = want;
    out.conv = conv0;
    kernels.GdnConvInputs({.rows = rows,
                           .key_heads = nk,
                           .value_heads = nv,
                           .dk = dk,
                           .dv = dv,
                           .q_scale = 0.25f,
                           .x = proj.data(),
                           .ldx = cin,
                           .conv_weight = conv_weight.data(),
                           .conv_kernel = kernel,
                           .conv_state = out.conv.data(),
                           .ba = proj.data() + ch + vw,
                           .ld_ba = cin,
                           .a_log = a_log.data(),
                           .dt_bias = dt_bias.data(),
                           .q = out.q.data(),
                           .k = out.k.data(),
                           .v = out.v.data(),
                           .gate = out.gate.data(),
                           .beta = out.beta.data()});
    return out;
  }();
  CHECK(std::equal(whole.v.begin(), whole.v.begin() + 8 * vw, want.v.begin()));
  for (int64_t r = 8; r < 8 + kernel - 1; ++r) {
    CAPTURE(r);
    CHECK_FALSE(std::equal(whole.v.begin() + r * vw, whole.v.begin() + (r + 1) * vw,
                           want.v.begin() + r * vw));
  }
}

TEST_CASE("LinearSteps gives the bits of its steps one by one: jumps back to back, a naive add") {
  // A compose's steps (live seams between jumps) and the rarer orders: two jumps in a row
  // (seam 0), a naive add, a narrow (bf16) S(C|0), and a last step that is a jump.
  constexpr int32_t nk = 2, nv = 4, dk = 16, dv = 16;
  constexpr int64_t state_floats = int64_t{nv} * dk * dv;
  const linear::Shape shape{.tokens = 0, .key_heads = nk, .value_heads = nv, .dk = dk, .dv = dv};
  testing::SeededRng rng(37);
  const std::vector<int64_t> live_rows = {5, 9, 70};
  std::vector<std::vector<float>> q, k, v, g, beta;
  for (int64_t n : live_rows) {
    q.push_back(rng.NormalVector(static_cast<size_t>(n * nk * dk), 0.25f));
    k.push_back(rng.NormalVector(static_cast<size_t>(n * nk * dk), 0.25f));
    v.push_back(rng.NormalVector(static_cast<size_t>(n * nv * dv)));
    std::vector<float> gi(static_cast<size_t>(n * nv)), bi(gi.size());
    for (size_t i = 0; i < gi.size(); ++i) {
      gi[i] = -0.05f - 0.1f * std::abs(rng.Normal());
      bi[i] = 0.5f + 0.4f * std::tanh(rng.Normal());
    }
    g.push_back(gi);
    beta.push_back(bi);
  }
  std::vector<std::vector<float>> transitions, zeros;
  for (int i = 0; i < 4; ++i) {
    transitions.push_back(rng.NormalVector(static_cast<size_t>(int64_t{nv} * dk * dk), 0.2f));
    zeros.push_back(rng.NormalVector(static_cast<size_t>(state_floats)));
  }
  std::vector<uint16_t> zero16(static_cast<size_t>(state_floats));
  ConvertElements(DType::kF32, zeros[3].data(), DType::kBF16, zero16.data(), zero16.size());
  std::vector<float> zero16_wide(zero16.size());
  ConvertElements(DType::kBF16, zero16.data(), DType::kF32, zero16_wide.data(), zero16.size());
  const auto initial = rng.NormalVector(static_cast<size_t>(state_floats));

  auto run = [&](bool one_region, int threads, std::vector<std::vector<float>>* outs) {
    cpu::ScopedComputeThreads budget(threads);
    CpuForwardKernels kernels;
    outs->clear();
    for (int64_t n : live_rows) outs->emplace_back(static_cast<size_t>(n * nv * dv), -1.0f);
    auto live = [&](size_t i) {
      return LinearStep{.tokens = live_rows[i],
                        .in = {.q = q[i].data(),
                               .k = k[i].data(),
                               .v = v[i].data(),
                               .g = g[i].data(),
                               .beta = beta[i].data()},
                        .o = (*outs)[i].data()};
    };
    auto jump = [&](size_t i, bool naive = false) {
      return LinearStep{.tokens = 0,
                        .in = {},
                        .o = nullptr,
                        .transition = naive ? nullptr : transitions[i].data(),
                        .zero_state = zeros[i].data()};
    };
    // The default cannot take a narrow zero state: it gets the same values widened.
    LinearStep narrow{.tokens = 0,
                      .in = {},
                      .o = nullptr,
                      .transition = transitions[3].data(),
                      .zero_state = zero16_wide.data()};
    if (one_region) {
      narrow.zero_state = zero16.data();
      narrow.zero_dtype = DType::kBF16;
    }
    // Ends on a jump and a naive add after the last live step.
    const std::vector<LinearStep> steps = {live(0), jump(0), jump(1), live(1),
                                           jump(1), live(2), narrow,  jump(2, true)};
    std::vector<float> state = initial;
    if (one_region) {
      kernels.LinearSteps(linear::Variant::kGdn, shape, steps, state.data());
    } else {
      kernels.ForwardKernels::LinearSteps(linear::Variant::kGdn, shape, steps, state.data());
    }
    REQUIRE(kernels.status().ok());
    return state;
  };
  std::vector<std::vector<float>> want_o, got_o;
  const std::vector<float> want = run(false, 2, &want_o);
  CHECK(want != initial);
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    CHECK(run(true, threads, &got_o) == want);
    CHECK(got_o == want_o);
  }
}

}  // namespace
}  // namespace hypic::model

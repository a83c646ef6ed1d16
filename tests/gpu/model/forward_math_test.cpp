// The HYPIC_HD math shared by the CPU and CUDA kernels (forward_math.h), against plain double
// formulas.
#include "gpu/model/forward_math.h"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "gpu/linear/linear_math.h"
#include "tests/support/seeded_rng.h"

namespace hypic::model {
namespace {

double Rel(double got, double want) {
  return std::abs(got - want) / std::max(std::abs(want), 1e-30);
}

TEST_CASE("FastExp, Sigmoid, Silu and Softplus match their double formulas") {
  for (double x = -80.0; x <= 80.0; x += 0.0371) {
    const auto xf = static_cast<float>(x);
    INFO("x = ", x);
    CHECK(Rel(FastExp(xf), std::exp(static_cast<double>(xf))) < 3e-7);
    const double sig = 1.0 / (1.0 + std::exp(-static_cast<double>(xf)));
    CHECK(Rel(Sigmoid(xf), sig) < 1e-6);
    CHECK(std::abs(Silu(xf) - xf * sig) <= 1e-6 * std::max(1.0, std::abs(x)));
    const double sp = x > 20.0 ? x : std::log1p(std::exp(static_cast<double>(xf)));
    CHECK(std::abs(Softplus(xf) - sp) <= 1e-6 * std::max(1.0, sp));
  }
  CHECK(std::isnan(FastExp(NAN)));
  CHECK(FastExp(-1000.0f) < 1e-37f);
}

TEST_CASE("row norms: zero-centred RMSNorm, gated RMSNorm and the L2 norm") {
  hypic::testing::SeededRng rng(3);
  const int64_t dim = 37;
  const std::vector<float> x = rng.NormalVector(dim, 2.0f), w = rng.NormalVector(dim, 0.3f),
                           z = rng.NormalVector(dim);
  double ss = 0.0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const double rms = std::sqrt(ss / dim + 1e-6);

  std::vector<float> y(dim);
  RmsNormZeroCentredRow(x.data(), w.data(), y.data(), dim, 1e-6f);
  for (int64_t i = 0; i < dim; ++i) CHECK(Rel(y[i], x[i] / rms * (1.0 + w[i])) < 1e-5);
  std::vector<float> in_place = x;  // x and y may alias
  RmsNormZeroCentredRow(in_place.data(), w.data(), in_place.data(), dim, 1e-6f);
  CHECK(in_place == y);

  std::vector<float> o = x;
  GatedRmsNormRow(o.data(), z.data(), w.data(), dim, 1e-6f);
  for (int64_t i = 0; i < dim; ++i) {
    const double silu = z[i] / (1.0 + std::exp(-static_cast<double>(z[i])));
    CHECK(std::abs(o[i] - w[i] * x[i] / rms * silu) <= 1e-5 * std::max(1.0, std::abs(x[i] / rms)));
  }

  std::vector<float> q(dim);
  L2NormRow(x.data(), q.data(), dim, 0.25f);
  double norm = 0.0;
  for (float v : q) norm += static_cast<double>(v) * v;
  CHECK(std::sqrt(norm) == doctest::Approx(0.25).epsilon(1e-5));
  for (int64_t i = 0; i < dim; ++i) CHECK(Rel(q[i], 0.25 * x[i] / std::sqrt(ss + 1e-6)) < 1e-5);
}

TEST_CASE("GDN decay, SwiGLU and the shared-expert gate") {
  const float a_log = 0.3f, a = -0.7f, dt = 0.2f;
  CHECK(Rel(GdnLogDecay(a_log, a, dt), -std::exp(0.3) * std::log1p(std::exp(-0.5))) < 1e-5);
  CHECK(GdnLogDecay(a_log, 30.0f, 0.0f) == doctest::Approx(-std::exp(0.3) * 30.0).epsilon(1e-5));

  std::vector<float> row = {1.0f, -2.0f, 0.5f, 3.0f};  // gate | up
  SwiGluRow(row.data(), 2);
  CHECK(Rel(row[0], 1.0 / (1.0 + std::exp(-1.0)) * 0.5) < 1e-6);
  CHECK(Rel(row[1], -2.0 / (1.0 + std::exp(2.0)) * 3.0) < 1e-6);
  CHECK(row[2] == 0.5f);  // the up half is left as it was

  const std::vector<float> x = {0.5f, -1.0f, 2.0f}, w = {1.0f, 0.25f, -0.5f};
  CHECK(Rel(SharedExpertGate(x.data(), w.data(), 3), 1.0 / (1.0 + std::exp(0.75))) < 1e-6);
}

TEST_CASE("RoPE pieces: inverse frequencies and the rotation of one pair") {
  CHECK(RopeInvFreq(10000.0, 0, 64) == 1.0);
  CHECK(Rel(RopeInvFreq(10000.0, 8, 64), std::pow(10000.0, -16.0 / 64.0)) < 1e-15);
  float c = 0.0f, s = 0.0f;
  const double inv = RopeInvFreq(10000.0, 3, 16);
  RopeCosSin(1234, inv, &c, &s);
  CHECK(Rel(c, std::cos(1234 * inv)) < 1e-6);
  CHECK(Rel(s, std::sin(1234 * inv)) < 1e-6);
  // Rotating by +angle then -angle gives the pair back; the norm is kept.
  float a = 0.8f, b = -1.7f;
  linear::RotatePair(a, b, c, s);
  CHECK(std::hypot(a, b) == doctest::Approx(std::hypot(0.8, -1.7)).epsilon(1e-6));
  linear::RotatePair(a, b, c, -s);
  CHECK(a == doctest::Approx(0.8).epsilon(1e-5));
  CHECK(b == doctest::Approx(-1.7).epsilon(1e-5));
}

}  // namespace
}  // namespace hypic::model

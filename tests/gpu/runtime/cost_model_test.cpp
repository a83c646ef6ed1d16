// CostModel: the prior from the model shape, and online calibration from measured times.
#include "gpu/runtime/cost_model.h"

#include <doctest/doctest.h>

#include <cmath>

#include "tests/support/seeded_rng.h"

namespace hypic::runtime {
namespace {

double Truth(uint32_t n) {
  double u = n / 1024.0;
  return 0.002 + 0.30 * u + 0.04 * u * u;
}

TEST_CASE("the shape prior turns FLOPs into seconds") {
  CostShape shape{2e8, 1e4};
  CostCoefficients c = CostModel::PriorFromShape(shape, 1e11, 0.001);
  CHECK(c.c == doctest::Approx(0.001));
  CHECK(c.a == doctest::Approx(2e8 * 1024 / 1e11));
  CHECK(c.b == doctest::Approx(1e4 * 1024.0 * 1024.0 / 2 / 1e11));
  CostModel model(c);
  CHECK(model.Estimate(1024) == doctest::Approx(c.c + c.a + c.b));
  CHECK(model.observations() == 0);
}

TEST_CASE("calibration recovers the true curve from varied lengths") {
  for (double noise : {0.0, 0.01}) {
    CAPTURE(noise);
    // A prior with the wrong scale and the wrong shape.
    CostModel model(CostCoefficients{0.0, 1.0, 0.0});
    testing::SeededRng rng(11);
    for (int i = 0; i < 60; ++i) {
      uint32_t n = rng.UniformInt(64, 4096);
      model.Observe(n, Truth(n) * (1.0 + noise * rng.Normal()));
    }
    CHECK(model.observations() == 60);
    for (uint32_t n : {128u, 1024u, 3000u, 4096u}) {
      CAPTURE(n);
      double err = std::abs(model.Estimate(n) - Truth(n));
      if (noise == 0.0) {
        CHECK(err / Truth(n) < 0.005);
      } else {
        // 1% noise on ~1 s prefills leaves the ~2 ms intercept uncertain by a few ms.
        CHECK((err / Truth(n) < 0.03 || err < 0.006));
      }
    }
  }
}

TEST_CASE("one observed length fixes the scale and keeps the prior's shape") {
  CostCoefficients prior{0.001, 0.1, 0.01};
  CostModel model(prior);
  model.Observe(1024, 0.555);  // 5x the prior at 1024
  CHECK(model.Estimate(1024) == doctest::Approx(0.555).epsilon(1e-3));
  double prior2048 = prior.c + 2 * prior.a + 4 * prior.b;
  CHECK(model.Estimate(2048) == doctest::Approx(5 * prior2048).epsilon(0.01));
}

TEST_CASE("forgetting follows a machine that became slower") {
  CostModel model(CostCoefficients{0.0, 0.3, 0.0}, 0.9);
  for (int i = 0; i < 30; ++i) model.Observe(1024 + 512 * (i % 3), Truth(1024 + 512 * (i % 3)));
  CHECK(model.Estimate(1024) == doctest::Approx(Truth(1024)).epsilon(0.02));
  for (int i = 0; i < 80; ++i) {
    uint32_t n = 1024 + 512 * (i % 3);
    model.Observe(n, 2 * Truth(n));
  }
  CHECK(model.Estimate(1024) == doctest::Approx(2 * Truth(1024)).epsilon(0.03));
}

TEST_CASE("bad observations are ignored and estimates never go negative") {
  CostModel model(CostCoefficients{0.0, 0.5, 0.0});
  model.Observe(1024, -1.0);
  model.Observe(1024, std::nan(""));
  CHECK(model.observations() == 0);
  CHECK(model.Estimate(0) >= 0.0);
  CHECK(model.Estimate(1024) == doctest::Approx(0.5));
}

}  // namespace
}  // namespace hypic::runtime

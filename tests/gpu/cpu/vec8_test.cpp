// vec8::Exp against std::exp in double: FastExp's error bound over the whole float range it
// serves, its clamps at both ends, NaN passing through, and every lane computed on its own.
#include "gpu/cpu/vec8.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "gpu/linear/linear_math.h"
#include "tests/support/seeded_rng.h"

namespace hypic::cpu {
namespace {

using vec8::V8;

V8 ExpOf(const float (&x)[8]) {
  V8 v;
  __builtin_memcpy(&v, x, sizeof v);
  return vec8::Exp(v);
}

TEST_CASE("vec8::Exp is within 3e-7 relative of exp over [-87.3, 88.3]") {
  testing::SeededRng rng(3);
  double worst = 0.0;
  for (int i = 0; i < 20000; ++i) {
    float x[8];
    for (float& xi : x) xi = rng.Uniform(-87.3f, 88.3f);
    if (i == 0) {  // the points the reduction handles specially
      const float edges[8] = {0.0f, -0.0f, 0.34657359f, -0.34657359f, 1.0f, -87.3f, 88.3f, 1e-30f};
      std::copy(edges, edges + 8, x);
    }
    const V8 e = ExpOf(x);
    for (int l = 0; l < 8; ++l) {
      const double want = std::exp(static_cast<double>(x[l]));
      worst = std::max(worst, std::abs(e[l] - want) / want);
    }
  }
  CAPTURE(worst);
  CHECK(worst < 3e-7);
}

TEST_CASE("vec8::Exp: clamped ends, NaN passes, lanes independent, as scalar FastExp") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float x[8] = {-1000.0f, -inf, 1000.0f, inf, nan, -88.0f, 2.0f, -2.0f};
  const V8 e = ExpOf(x);
  for (int l : {0, 1}) {  // below -87.3: exp(-87.3), tiny and positive, not 0
    CHECK(e[l] > 0.0f);
    CHECK(e[l] < 1e-37f);
  }
  for (int l : {2, 3}) {  // above 88.3: exp(88.3), finite
    CHECK(std::isfinite(e[l]));
    CHECK(e[l] > 1e38f);
  }
  CHECK(std::isnan(e[4]));
  CHECK(e[5] == e[0]);  // -88 clamps as -1000 does
  CHECK(std::abs(e[6] - 7.389056f) < 7.389056f * 3e-7f);
  CHECK(std::abs(e[7] - 0.135335283f) < 0.135335283f * 3e-7f);
  // Each lane alone gives the same value as in company; and the scalar FastExp's, each within
  // its 3e-7 of the truth.
  for (int l = 0; l < 8; ++l) {
    if (std::isnan(x[l])) continue;
    float alone[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    alone[l] = x[l];
    CHECK(ExpOf(alone)[l] == e[l]);
    const float scalar = linear::FastExp(x[l]);
    CHECK(std::abs(scalar - e[l]) <= std::abs(scalar) * 6e-7f);
  }
}

}  // namespace
}  // namespace hypic::cpu

// RoPE re-rotation (MATH.md §4): a segment computed at offset 0 and re-rotated to offset delta
// equals the segment computed at delta, for S(C|0), the transition and the outputs.
#include "gpu/linear/rope_rotation.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu/linear/linear_attention.h"
#include "tests/gpu/linear/linear_reference.h"
#include "tests/support/check_ok.h"

namespace hypic::linear {
namespace {

using testing::RelError;

// NeoX RoPE of every [dk] row of x [T, H, dk] at position offset + t, computed in double.
std::vector<float> Rope(const std::vector<float>& x, const Shape& s, const RopeParams& rope,
                        int64_t offset) {
  std::vector<float> out = x;
  const int half = rope.rotary_dim / 2;
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int h = 0; h < s.key_heads; ++h) {
      float* row = out.data() + (t * s.key_heads + h) * s.dk;
      for (int i = 0; i < half; ++i) {
        const double angle =
            static_cast<double>(offset + t) * std::pow(rope.theta, -2.0 * i / rope.rotary_dim);
        const double a = row[i], b = row[i + half];
        row[i] = static_cast<float>(a * std::cos(angle) - b * std::sin(angle));
        row[i + half] = static_cast<float>(b * std::cos(angle) + a * std::sin(angle));
      }
    }
  }
  return out;
}

TEST_CASE("a segment at offset 0 re-rotated to delta equals the segment computed at delta") {
  const RopeParams rope{8, 10000.0};  // partial: 8 of 16 dims rotate
  uint64_t seed = 300;
  for (Variant variant : {Variant::kLinear, Variant::kRetNet, Variant::kDeltaNet, Variant::kGdn}) {
    for (int64_t delta : {int64_t{37}, int64_t{1000}}) {
      const Shape shape{90, 2, 4, 16, 12};
      testing::Problem p = testing::MakeProblem(variant, shape, seed++, 0.05f, false);
      const TransitionForm form = TransitionFormOf(variant);
      struct Out {
        std::vector<float> o, zero, t;
      };
      auto run = [&](int64_t offset) {
        testing::Problem r = p;
        r.q = Rope(p.q, shape, rope, offset);
        r.k = Rope(p.k, shape, rope, offset);
        Out out{std::vector<float>(shape.tokens * shape.value_heads * shape.dv),
                std::vector<float>(p.state_floats()),
                std::vector<float>(TransitionFloats(form, shape))};
        REQUIRE_OK(ChunkedForward(variant, shape, r.inputs(), nullptr,
                                  Outputs{out.o.data(), nullptr, out.zero.data(), out.t.data()}));
        return out;
      };
      Out at0 = run(0);
      const Out at_delta = run(delta);
      INFO("variant=", std::string(VariantName(variant)), " delta=", delta);
      // Not rotating is wrong: the test can tell the difference.
      CHECK(RelError(at0.zero, at_delta.zero) > 1e-2);
      RerotateState(shape, rope, delta, at0.zero.data());
      RerotateTransition(form, shape, rope, delta, at0.t.data());
      CHECK(RelError(at0.zero, at_delta.zero) <= 1e-5);
      CHECK(RelError(at0.t, at_delta.t) <= 1e-5);
      CHECK(RelError(at0.o, at_delta.o) <= 1e-5);  // q and k rotate together
    }
  }
}

TEST_CASE("re-rotation composes: delta1 then delta2 equals delta1 + delta2") {
  const RopeParams rope{16, 1e6};
  const Shape shape{0, 1, 2, 16, 4};
  hypic::testing::SeededRng rng(9);
  std::vector<float> a = rng.NormalVector(int64_t{2} * 16 * 4);
  std::vector<float> b = a;
  RerotateState(shape, rope, 100, a.data());
  RerotateState(shape, rope, 23, a.data());
  RerotateState(shape, rope, 123, b.data());
  CHECK(RelError(a, b) <= 1e-5);
  std::vector<float> t = rng.NormalVector(int64_t{2} * 16 * 16), u = t;
  RerotateTransition(TransitionForm::kDense, shape, rope, 7, t.data());
  RerotateTransition(TransitionForm::kDense, shape, rope, -7, t.data());
  CHECK(RelError(t, u) <= 1e-5);
}

}  // namespace
}  // namespace hypic::linear

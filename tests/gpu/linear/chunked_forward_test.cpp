// Chunked and recurrent forwards against the test's own float64 reference, for every variant,
// the lengths of issue 3, GVA ratios 1 and 2, dk != dv and chunk sizes 16/32/64.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "gpu/linear/linear_attention.h"
#include "tests/gpu/linear/linear_reference.h"
#include "tests/support/check_ok.h"

namespace hypic::linear {
namespace {

using testing::MakeProblem;
using testing::Problem;
using testing::ReferenceForward;
using testing::RelError;

constexpr double kTol = 1e-5;
constexpr Variant kAllVariants[] = {Variant::kLinear, Variant::kRetNet,   Variant::kMamba2,
                                    Variant::kGla,    Variant::kDeltaNet, Variant::kGdn,
                                    Variant::kKda};

struct Result {
  std::vector<float> o, final_state, zero_state, transition, dense;
};

template <typename Fn>
Result Run(const Problem& p, Fn&& forward) {
  const TransitionForm form = TransitionFormOf(p.variant);
  Result r;
  r.o.assign(p.shape.tokens * p.shape.value_heads * p.shape.dv, -1.0f);
  r.final_state.assign(p.state_floats(), -1.0f);
  r.zero_state.assign(p.state_floats(), -1.0f);
  r.transition.assign(TransitionFloats(form, p.shape), -1.0f);
  r.dense.assign(int64_t{p.shape.value_heads} * p.shape.dk * p.shape.dk, 0.0f);
  Outputs out{r.o.data(), r.final_state.data(), r.zero_state.data(), r.transition.data()};
  REQUIRE_OK(forward(p.inputs(), p.initial.empty() ? nullptr : p.initial.data(), out));
  ExpandTransition(form, p.shape, r.transition.data(), r.dense.data());
  return r;
}

void CheckAgainstReference(const Problem& p, const Result& r, const char* what) {
  const testing::Reference ref = ReferenceForward(p);
  INFO(std::string(what), " variant=", VariantName(p.variant), " T=", p.shape.tokens,
       " H=", p.shape.key_heads, " HV=", p.shape.value_heads);
  CHECK(RelError(r.o, ref.o) <= kTol);
  CHECK(RelError(r.final_state, ref.final_state) <= kTol);
  CHECK(RelError(r.zero_state, ref.zero_state) <= kTol);
  CHECK(RelError(r.dense, ref.transition) <= kTol);
}

TEST_CASE("chunked and recurrent match the float64 reference for every variant") {
  uint64_t seed = 1;
  for (Variant variant : kAllVariants) {
    for (int64_t tokens : {0, 1, 63, 64, 65, 200, 1000}) {
      for (int ratio : {1, 2}) {
        Shape shape{tokens, 1, ratio, 16, 24};
        const Problem p = MakeProblem(variant, shape, seed++);
        const Result chunked = Run(p, [&](const Inputs& in, const float* s0, const Outputs& o) {
          return ChunkedForward(variant, shape, in, s0, o);
        });
        CheckAgainstReference(p, chunked, "chunked");
        if (tokens <= 200) {
          const Result recurrent = Run(p, [&](const Inputs& in, const float* s0, const Outputs& o) {
            return RecurrentForward(variant, shape, in, s0, o);
          });
          CheckAgainstReference(p, recurrent, "recurrent");
          // And chunked against recurrent directly, as the issue states it.
          CHECK(RelError(chunked.o, recurrent.o) <= kTol);
          CHECK(RelError(chunked.final_state, recurrent.final_state) <= kTol);
          CHECK(RelError(chunked.zero_state, recurrent.zero_state) <= kTol);
          CHECK(RelError(chunked.dense, recurrent.dense) <= kTol);
        }
      }
    }
  }
}

TEST_CASE("every chunk size gives the same result, with and without an initial state") {
  uint64_t seed = 100;
  for (Variant variant : kAllVariants) {
    for (bool with_initial : {true, false}) {
      Shape shape{150, 1, 2, 8, 12};
      const Problem p = MakeProblem(variant, shape, seed++, 0.2f, with_initial);
      for (int chunk : {16, 32, 64}) {
        const Result r = Run(p, [&](const Inputs& in, const float* s0, const Outputs& o) {
          return ChunkedForward(variant, shape, in, s0, o, ChunkOptions{chunk});
        });
        CheckAgainstReference(p, r, "chunk size");
      }
    }
  }
}

TEST_CASE("strong decays do not overflow the chunked form") {
  // Per-token log-decays down to -8: e^{-b} over a 64-token chunk would overflow fp32, so
  // this checks that only e^{b_r - b_s} with r >= s is ever formed.
  uint64_t seed = 200;
  for (Variant variant : {Variant::kMamba2, Variant::kGla, Variant::kGdn, Variant::kKda}) {
    Shape shape{130, 1, 1, 8, 8};
    const Problem p = MakeProblem(variant, shape, seed++, 8.0f);
    const Result r = Run(p, [&](const Inputs& in, const float* s0, const Outputs& o) {
      return ChunkedForward(variant, shape, in, s0, o);
    });
    const testing::Reference ref = ReferenceForward(p);
    CHECK(RelError(r.o, ref.o) <= kTol);
    CHECK(RelError(r.final_state, ref.final_state) <= kTol);
  }
}

TEST_CASE("outputs may be requested one at a time") {
  Shape shape{70, 2, 4, 8, 8};
  const Problem p = MakeProblem(Variant::kGdn, shape, 7);
  const testing::Reference ref = ReferenceForward(p);
  std::vector<float> o(shape.tokens * shape.value_heads * shape.dv);
  REQUIRE_OK(ChunkedForward(Variant::kGdn, shape, p.inputs(), p.initial.data(),
                            Outputs{o.data(), nullptr, nullptr, nullptr}));
  CHECK(RelError(o, ref.o) <= kTol);
  std::vector<float> zero(p.state_floats());
  REQUIRE_OK(ChunkedForward(Variant::kGdn, shape, p.inputs(), p.initial.data(),
                            Outputs{nullptr, nullptr, zero.data(), nullptr}));
  CHECK(RelError(zero, ref.zero_state) <= kTol);
  std::vector<float> t(TransitionFloats(TransitionForm::kDense, shape));
  REQUIRE_OK(ChunkedForward(Variant::kGdn, shape, p.inputs(), nullptr,
                            Outputs{nullptr, nullptr, nullptr, t.data()}));
  CHECK(RelError(t, ref.transition) <= kTol);
}

TEST_CASE("the final state may alias the initial state (in-place update)") {
  const Shape shape{100, 2, 4, 8, 8};
  for (Variant variant : kAllVariants) {
    const Problem p = MakeProblem(variant, shape, 17);
    const testing::Reference ref = ReferenceForward(p);
    for (bool chunked : {true, false}) {
      std::vector<float> state = p.initial;
      const Outputs out{nullptr, state.data(), nullptr, nullptr};
      REQUIRE_OK(chunked ? ChunkedForward(variant, shape, p.inputs(), state.data(), out)
                         : RecurrentForward(variant, shape, p.inputs(), state.data(), out));
      CHECK(RelError(state, ref.final_state) <= kTol);
    }
  }
}

TEST_CASE("Validate rejects bad shapes and missing inputs, naming them") {
  Shape shape{4, 2, 3, 8, 8};
  const Problem ok = MakeProblem(Variant::kGdn, Shape{4, 1, 2, 8, 8}, 3);
  Status st = Validate(Variant::kGdn, shape, ok.inputs());
  CHECK(st.code() == StatusCode::kBadRequest);
  CHECK(st.message().find("multiple") != std::string::npos);
  Inputs missing = ok.inputs();
  missing.beta = nullptr;
  st = Validate(Variant::kGdn, Shape{4, 1, 2, 8, 8}, missing);
  CHECK(st.message().find("beta") != std::string::npos);
  missing = ok.inputs();
  missing.g = nullptr;
  st = Validate(Variant::kGdn, Shape{4, 1, 2, 8, 8}, missing);
  CHECK(st.message().find("g [T,HV]") != std::string::npos);
  CHECK(Validate(Variant::kDeltaNet, Shape{4, 1, 2, 8, 8}, missing).ok());
  CHECK(Validate(Variant::kGdn, Shape{4, 1, 2, 0, 8}, ok.inputs()).code() ==
        StatusCode::kBadRequest);
  std::vector<float> o(8 * 2 * 4);
  CHECK(ChunkedForward(Variant::kGdn, Shape{4, 1, 2, 8, 8}, ok.inputs(), nullptr,
                       Outputs{o.data(), nullptr, nullptr, nullptr}, ChunkOptions{48})
            .code() == StatusCode::kBadRequest);
}

TEST_CASE("variant names round-trip") {
  for (Variant v : kAllVariants) {
    auto back = VariantFromName(VariantName(v));
    REQUIRE(back.has_value());
    CHECK(*back == v);
  }
  CHECK(!VariantFromName("mamba3").has_value());
}

}  // namespace
}  // namespace hypic::linear

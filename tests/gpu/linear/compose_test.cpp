// The (T, S) algebra: splitting a sequence into pieces and composing their (T_C, S(C|0)) pairs
// reproduces the one-pass state; the tree reduction equals the left fold; naive add is
// measurably wrong for every decaying variant and exact only for plain linear attention.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gpu/linear/linear_attention.h"
#include "tests/gpu/linear/linear_reference.h"
#include "tests/support/check_ok.h"

namespace hypic::linear {
namespace {

using testing::MakeProblem;
using testing::Problem;
using testing::RelError;

constexpr Variant kAllVariants[] = {Variant::kLinear, Variant::kRetNet,   Variant::kMamba2,
                                    Variant::kGla,    Variant::kDeltaNet, Variant::kGdn,
                                    Variant::kKda};

// Tokens [begin, end) of `p` as a problem of its own (no initial state).
Problem Slice(const Problem& p, int64_t begin, int64_t end) {
  const Shape& s = p.shape;
  Problem out;
  out.variant = p.variant;
  out.shape = s;
  out.shape.tokens = end - begin;
  auto cut = [&](const std::vector<float>& x, int64_t per_token) {
    if (x.empty()) return std::vector<float>();
    return std::vector<float>(x.begin() + begin * per_token, x.begin() + end * per_token);
  };
  const int64_t gate_per = HasDiagGate(p.variant) ? int64_t{s.value_heads} * s.dk : s.value_heads;
  out.q = cut(p.q, int64_t{s.key_heads} * s.dk);
  out.k = cut(p.k, int64_t{s.key_heads} * s.dk);
  out.v = cut(p.v, int64_t{s.value_heads} * s.dv);
  out.g = cut(p.g, gate_per);
  out.beta = cut(p.beta, s.value_heads);
  return out;
}

struct Pair {
  std::vector<float> t, s;
};

Pair SegmentPair(const Problem& piece) {
  Pair pair;
  pair.t.resize(TransitionFloats(TransitionFormOf(piece.variant), piece.shape));
  pair.s.resize(piece.state_floats());
  Outputs out;
  out.zero_state = pair.s.data();
  out.transition = pair.t.data();
  REQUIRE_OK(ChunkedForward(piece.variant, piece.shape, piece.inputs(), nullptr, out));
  return pair;
}

std::vector<float> FinalState(const Problem& p) {
  std::vector<float> s(p.state_floats());
  Outputs out;
  out.final_state = s.data();
  REQUIRE_OK(ChunkedForward(p.variant, p.shape, p.inputs(), p.initial.data(), out));
  return s;
}

TEST_CASE("composing random splits equals one pass; tree reduction equals the left fold") {
  hypic::testing::SeededRng rng(42);
  uint64_t seed = 1000;
  for (Variant variant : kAllVariants) {
    for (int trial = 0; trial < 3; ++trial) {
      const Shape shape{300, 2, 4, 16, 12};
      const Problem p = MakeProblem(variant, shape, seed++);
      const TransitionForm form = TransitionFormOf(variant);
      const int pieces = static_cast<int>(rng.UniformInt(2, 8));
      std::vector<int64_t> cuts = {0, shape.tokens};
      while (static_cast<int>(cuts.size()) < pieces + 1) {
        const int64_t c = rng.UniformInt(1, shape.tokens - 1);
        if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
      }
      std::sort(cuts.begin(), cuts.end());
      std::vector<Pair> pairs;
      for (size_t i = 0; i + 1 < cuts.size(); ++i) {
        pairs.push_back(SegmentPair(Slice(p, cuts[i], cuts[i + 1])));
      }
      std::vector<const float*> ts, ss;
      for (const Pair& pr : pairs) {
        ts.push_back(pr.t.data());
        ss.push_back(pr.s.data());
      }
      INFO("variant=", std::string(VariantName(variant)), " pieces=", pieces);
      const std::vector<float> one_pass = FinalState(p);

      // Left fold, applied to the running state.
      std::vector<float> fold = p.initial;
      ApplySegments(form, shape, pieces, ts.data(), ss.data(), fold.data());
      CHECK(RelError(fold, one_pass) <= 1e-5);

      // Tree reduction of the pairs, then applied once.
      Pair tree;
      tree.t.resize(TransitionFloats(form, shape));
      tree.s.resize(p.state_floats());
      CombineTree(form, shape, pieces, ts.data(), ss.data(), tree.t.data(), tree.s.data());
      std::vector<float> via_tree = p.initial;
      ApplyTransition(form, shape, tree.t.data(), tree.s.data(), via_tree.data());
      CHECK(RelError(via_tree, fold) <= 1e-5);

      // Left fold of Combine on the pairs themselves: same pair as the tree and as one pass.
      Pair left = pairs[0];
      for (int i = 1; i < pieces; ++i) {
        Pair next{std::vector<float>(left.t.size()), std::vector<float>(left.s.size())};
        Combine(form, shape, pairs[i].t.data(), pairs[i].s.data(), left.t.data(), left.s.data(),
                next.t.data(), next.s.data());
        left = std::move(next);
      }
      CHECK(RelError(tree.t, left.t) <= 1e-5);
      CHECK(RelError(tree.s, left.s) <= 1e-5);
      Problem whole = p;
      whole.initial.clear();
      const Pair direct = SegmentPair(whole);
      CHECK(RelError(left.s, direct.s) <= 1e-5);
      CHECK(RelError(left.t, direct.t) <= 1e-5);
    }
  }
}

TEST_CASE("naive add is measurably wrong for every decaying variant, exact for linear") {
  // Issue 3's strawman setup: a 256-token prefix, then a 256-token segment.
  uint64_t seed = 2000;
  for (Variant variant : kAllVariants) {
    const Shape shape{512, 2, 4, 16, 16};
    Problem p = MakeProblem(variant, shape, seed++, 0.05f, false);
    const TransitionForm form = TransitionFormOf(variant);
    const Problem prefix = Slice(p, 0, 256);
    const Problem segment = Slice(p, 256, 512);
    const std::vector<float> truth = FinalState(p);
    std::vector<float> running(p.state_floats());
    Outputs out;
    out.final_state = running.data();
    REQUIRE_OK(ChunkedForward(variant, prefix.shape, prefix.inputs(), nullptr, out));
    const Pair seg = SegmentPair(segment);
    std::vector<float> naive = running;
    NaiveAdd(shape, seg.s.data(), naive.data());
    std::vector<float> composed = running;
    ApplyTransition(form, shape, seg.t.data(), seg.s.data(), composed.data());
    INFO("variant=", std::string(VariantName(variant)));
    CHECK(RelError(composed, truth) <= 1e-5);
    if (variant == Variant::kLinear) {
      CHECK(RelError(naive, truth) <= 1e-6);
    } else {
      CHECK(RelError(naive, truth) >= 0.05);
    }
  }
}

TEST_CASE("an empty segment is the identity pair") {
  const Shape shape{0, 1, 2, 8, 8};
  for (Variant variant : kAllVariants) {
    const Problem p = MakeProblem(variant, shape, 5);
    const Pair pair = SegmentPair(p);
    std::vector<float> state = p.initial;
    ApplyTransition(TransitionFormOf(variant), shape, pair.t.data(), pair.s.data(), state.data());
    CHECK(RelError(state, p.initial) == 0.0);
  }
}

}  // namespace
}  // namespace hypic::linear

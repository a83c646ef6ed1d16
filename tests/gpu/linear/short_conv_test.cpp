// The short causal conv and the warm-up rule of MATH.md §3 on a miniature GDN/KDA layer:
// running prefix P then segment C token by token equals running P, then C's seam tokens [0, w)
// from P's state, then applying C's cached (T, S) of [w, n) and taking its conv tail.
#include "gpu/linear/short_conv.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu/linear/linear_attention.h"
#include "tests/gpu/linear/linear_reference.h"
#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic::linear {
namespace {

using testing::RelError;

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

TEST_CASE("CausalConv matches the direct formula, with bias, state and in pieces") {
  hypic::testing::SeededRng rng(3);
  constexpr int K = 4;
  constexpr int64_t T = 11;
  // Channels one at a time, and whole 64-channel blocks then a tail.
  for (const int C : {5, 2 * 64 + 5}) {
    const std::vector<float> x = rng.NormalVector(T * C), w = rng.NormalVector(C * K),
                             bias = rng.NormalVector(C), init = rng.NormalVector((K - 1) * C);
    for (bool silu : {true, false}) {
      CAPTURE(C);
      // Direct: the window is [init; x].
      std::vector<double> expect(static_cast<size_t>(T * C));
      for (int64_t t = 0; t < T; ++t) {
        for (int c = 0; c < C; ++c) {
          double acc = bias[c];
          for (int j = 0; j < K; ++j) {
            const int64_t p = t - (K - 1) + j;  // input position, negative = from the state
            const float xv = p < 0 ? init[(p + K - 1) * C + c] : x[p * C + c];
            acc += double{w[c * K + j]} * xv;
          }
          expect[t * C + c] = silu ? Silu(acc) : acc;
        }
      }
      std::vector<float> state = init, y(T * C);
      CausalConv(ConvShape{T, C, K}, x.data(), w.data(), bias.data(), state.data(), y.data(), silu);
      CHECK(RelError(y, expect) <= 1e-6);
      // The state is the last K-1 inputs.
      CHECK(std::vector<float>(state) == std::vector<float>(x.end() - (K - 1) * C, x.end()));

      // Token by token (pieces shorter than K-1 exercise the state shift) gives the same.
      std::vector<float> state2 = init, y2(T * C);
      for (int64_t t = 0; t < T;) {
        const int64_t len = std::min<int64_t>(1 + t % 2, T - t);
        CausalConv(ConvShape{len, C, K}, x.data() + t * C, w.data(), bias.data(), state2.data(),
                   y2.data() + t * C, silu);
        t += len;
      }
      CHECK(y2 == y);
      CHECK(state2 == state);
    }
  }
}

// A miniature linear layer: pre-conv inputs [q | k | v] per token, plus per-token g and beta.
struct Layer {
  Variant variant;
  Shape shape;  // tokens unused
  int channels() const { return 2 * shape.key_heads * shape.dk + shape.value_heads * shape.dv; }
  std::vector<float> weight;  // [C, K]
};

struct Tokens {
  int64_t n = 0;
  std::vector<float> x, g, beta;  // pre-conv [n, C]; g [n, HV(, dk)]; beta [n, HV]
};

Tokens MakeTokens(const Layer& layer, int64_t n, hypic::testing::SeededRng& rng) {
  Tokens t;
  t.n = n;
  t.x = rng.NormalVector(n * layer.channels());
  const int64_t gper = HasDiagGate(layer.variant) ? layer.shape.dk : 1;
  t.g.resize(n * layer.shape.value_heads * gper);
  for (auto& g : t.g) g = rng.Uniform(-0.1f, 0.0f);
  t.beta.resize(n * layer.shape.value_heads);
  for (auto& b : t.beta) b = rng.Uniform(0.05f, 0.95f);
  return t;
}

Tokens SliceTokens(const Layer& layer, const Tokens& t, int64_t b, int64_t e) {
  const int64_t C = layer.channels();
  const int64_t gper = t.g.size() / t.n, bper = t.beta.size() / t.n;
  Tokens s;
  s.n = e - b;
  s.x.assign(t.x.begin() + b * C, t.x.begin() + e * C);
  s.g.assign(t.g.begin() + b * gper, t.g.begin() + e * gper);
  s.beta.assign(t.beta.begin() + b * bper, t.beta.begin() + e * bper);
  return s;
}

// Runs the conv from `conv_state` (updated), then the recurrence from `state` (updated) over
// the tokens `[from, n)` of the conv output; tokens before `from` only warm the conv.
void RunLayer(const Layer& layer, const Tokens& t, int64_t from, std::vector<float>& conv_state,
              std::vector<float>& state, bool chunked, Outputs extra = {}) {
  const int C = layer.channels();
  const int H = layer.shape.key_heads, HV = layer.shape.value_heads;
  const int dk = layer.shape.dk, dv = layer.shape.dv;
  std::vector<float> y(t.n * C);
  CausalConv(ConvShape{t.n, C, 4}, t.x.data(), layer.weight.data(), nullptr, conv_state.data(),
             y.data());
  const int64_t n = t.n - from;
  std::vector<float> q(n * H * dk), k(n * H * dk), v(n * HV * dv);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = y.data() + (from + i) * C;
    std::copy(row, row + H * dk, q.begin() + i * H * dk);
    std::copy(row + H * dk, row + 2 * H * dk, k.begin() + i * H * dk);
    std::copy(row + 2 * H * dk, row + C, v.begin() + i * HV * dv);
  }
  testing::L2NormalizeRows(q, dk);
  testing::L2NormalizeRows(k, dk);
  const int64_t gper = t.g.size() / t.n;
  Inputs in{q.data(), k.data(), v.data(), t.g.data() + from * gper, t.beta.data() + from * HV};
  Shape shape = layer.shape;
  shape.tokens = n;
  std::vector<float> init = state;
  extra.final_state = state.data();
  if (chunked) {
    REQUIRE_OK(ChunkedForward(layer.variant, shape, in, init.data(), extra));
  } else {
    REQUIRE_OK(RecurrentForward(layer.variant, shape, in, init.data(), extra));
  }
}

TEST_CASE("conv warm-up: seam tokens then the cached (T, S) equal running P then C") {
  hypic::testing::SeededRng rng(11);
  for (Variant variant : {Variant::kGdn, Variant::kKda, Variant::kMamba2}) {
    for (int w : {1, 3, 8}) {  // w = 1 < K-1 breaks the rule: the test must see it
      Layer layer{variant, Shape{0, 2, 4, 8, 6}, {}};
      layer.weight = rng.NormalVector(layer.channels() * 4, 0.5f);
      const Tokens prefix = MakeTokens(layer, 70, rng);
      const Tokens segment = MakeTokens(layer, 90, rng);
      const int64_t state_floats =
          int64_t{layer.shape.value_heads} * layer.shape.dk * layer.shape.dv;
      const int64_t conv_floats = 3 * int64_t{layer.channels()};

      // Truth: P then C, token by token, conv and recurrence.
      std::vector<float> conv_truth(conv_floats, 0.0f), s_truth(state_floats, 0.0f);
      for (const Tokens* part : {&prefix, &segment}) {
        for (int64_t i = 0; i < part->n; ++i) {
          RunLayer(layer, SliceTokens(layer, *part, i, i + 1), 0, conv_truth, s_truth, false);
        }
      }

      // The cache entry: the segment alone, conv warmed by [0, w), recurrence over [w, n).
      std::vector<float> conv_alone(conv_floats, 0.0f), s_alone(state_floats, 0.0f);
      std::vector<float> zero_state(state_floats),
          transition(TransitionFloats(TransitionFormOf(variant), layer.shape));
      Outputs entry;
      entry.zero_state = zero_state.data();
      entry.transition = transition.data();
      RunLayer(layer, segment, w, conv_alone, s_alone, true, entry);
      const std::vector<float> conv_tail = conv_alone;

      // Reuse: P (chunked), then the seam from P's conv and recurrent state, then (T, S).
      std::vector<float> conv(conv_floats, 0.0f), s(state_floats, 0.0f);
      RunLayer(layer, prefix, 0, conv, s, true);
      RunLayer(layer, SliceTokens(layer, segment, 0, w), 0, conv, s, true);
      ApplyTransition(TransitionFormOf(variant), layer.shape, transition.data(), zero_state.data(),
                      s.data());
      conv = conv_tail;

      INFO("variant=", std::string(VariantName(variant)), " w=", w);
      if (w >= 3) {
        CHECK(RelError(s, s_truth) <= 1e-5);
      } else {
        CHECK(RelError(s, s_truth) > 1e-4);  // decayed over 90 tokens, still 10x the tolerance
      }
      CHECK(conv == conv_truth);
    }
  }
}

}  // namespace
}  // namespace hypic::linear

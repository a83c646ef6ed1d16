// `hypic-op table`: the strawman comparison of the paper (issue 3). For every variant, a
// 256-token prefix P is followed by a 256-token segment C with realistic gates; the state after
// P then C is computed three ways:
//   one pass   RecurrentForward over P C (the truth);
//   naive add  S(P) + S(C|0), the strawman that ignores C's transition;
//   hypic      T_C S(P) + S(C|0), with (T_C, S(C|0)) from C's chunked forward alone;
// and the relative state error of the last two against the truth is printed, with the cached
// (T_C, S(C|0)) kept in fp32 and rounded to bf16. RetNet is shown per head (gamma_h =
// 1 - 2^(-5-h): head 7 is the slowest), the others over all heads.
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gpu/linear/linear_attention.h"
#include "tools/common/subcommand.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::op_table {
namespace {

using linear::Shape;
using linear::TransitionForm;
using linear::Variant;

struct TableOptions {
  int64_t prefix = 256;
  int64_t segment = 256;
  int heads = 8;
  int dk = 64;
  int dv = 64;
  uint64_t seed = 1;
};

struct Tokens {
  std::vector<float> q, k, v, g, beta;
};

double Softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }
double LogSigmoid(double x) { return -Softplus(-x); }

// Realistic inputs for `tokens` tokens: L2-normalised q/k, and per variant the gate the layer
// would produce: RetNet's fixed gamma_h; Mamba2/GDN's g = -exp(A_log) softplus(a + dt_bias)
// with per-head A_log and dt_bias; GLA/KDA's logsigmoid(x)/16 per key dim; beta = sigmoid(b).
Tokens MakeTokens(Variant variant, const Shape& s, std::mt19937_64& gen) {
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  Tokens t;
  const int64_t T = s.tokens;
  auto fill = [&](std::vector<float>& x, int64_t n) {
    x.resize(n);
    for (auto& e : x) e = static_cast<float>(normal(gen));
  };
  fill(t.q, T * s.key_heads * s.dk);
  fill(t.k, T * s.key_heads * s.dk);
  fill(t.v, T * s.value_heads * s.dv);
  for (auto* x : {&t.q, &t.k}) {
    for (size_t r = 0; r < x->size(); r += s.dk) {
      double n = 0;
      for (int i = 0; i < s.dk; ++i) n += double{(*x)[r + i]} * (*x)[r + i];
      for (int i = 0; i < s.dk; ++i) (*x)[r + i] = static_cast<float>((*x)[r + i] / std::sqrt(n));
    }
  }
  const int HV = s.value_heads;
  std::vector<double> a_log(HV), dt_bias(HV);
  for (int h = 0; h < HV; ++h) {
    a_log[h] = std::log(1.0 + 15.0 * uni(gen));                   // A in [1, 16]
    dt_bias[h] = std::log(std::expm1(0.001 + 0.099 * uni(gen)));  // dt in [0.001, 0.1]
  }
  if (linear::HasGate(variant)) {
    const int per = linear::HasDiagGate(variant) ? s.dk : 1;
    t.g.resize(T * HV * per);
    for (int64_t i = 0; i < T; ++i) {
      for (int h = 0; h < HV; ++h) {
        for (int d = 0; d < per; ++d) {
          double g = 0;
          if (variant == Variant::kRetNet) {
            g = std::log1p(-std::ldexp(1.0, -5 - h));
          } else if (per == 1) {
            g = -std::exp(a_log[h]) * Softplus(normal(gen) + dt_bias[h]);
          } else {
            g = LogSigmoid(normal(gen)) / 16.0;
          }
          t.g[(i * HV + h) * per + d] = static_cast<float>(g);
        }
      }
    }
  }
  if (linear::HasBeta(variant)) {
    t.beta.resize(T * HV);
    for (auto& b : t.beta) b = static_cast<float>(1.0 / (1.0 + std::exp(-normal(gen))));
  }
  return t;
}

linear::Inputs InputsOf(const Tokens& t, int64_t offset, const Shape& s) {
  const int64_t per_q = int64_t{s.key_heads} * s.dk, per_v = int64_t{s.value_heads} * s.dv;
  const int64_t per_g = t.g.empty() ? 0 : static_cast<int64_t>(t.g.size()) / (t.q.size() / per_q);
  return linear::Inputs{t.q.data() + offset * per_q, t.k.data() + offset * per_q,
                        t.v.data() + offset * per_v,
                        t.g.empty() ? nullptr : t.g.data() + offset * per_g,
                        t.beta.empty() ? nullptr : t.beta.data() + offset * s.value_heads};
}

// Relative error over heads [h0, h1) of [HV, dk, dv] states.
double RelError(const std::vector<float>& x, const std::vector<float>& ref, const Shape& s, int h0,
                int h1) {
  const int64_t n = int64_t{s.dk} * s.dv;
  double num = 0, den = 0;
  for (int64_t i = h0 * n; i < h1 * n; ++i) {
    num += (double{x[i]} - ref[i]) * (double{x[i]} - ref[i]);
    den += double{ref[i]} * ref[i];
  }
  return std::sqrt(num / den);
}

std::vector<float> RoundBf16(std::vector<float> x) {
  for (auto& e : x) e = Bf16ToF32(F32ToBf16(e));
  return x;
}

int Table(const TableOptions& opt) {
  fmt::print("Prefix {} + segment {} tokens, {} heads, dk={} dv={}, seed {}.\n", opt.prefix,
             opt.segment, opt.heads, opt.dk, opt.dv, opt.seed);
  fmt::print("Relative state error against one pass over prefix+segment:\n\n");
  fmt::print(
      "| variant | heads | naive add (fp32) | HYPIC (fp32) | naive add (bf16) | HYPIC (bf16) |\n");
  fmt::print("|---|---|---|---|---|---|\n");
  std::mt19937_64 gen(opt.seed);
  for (Variant variant : {Variant::kLinear, Variant::kRetNet, Variant::kMamba2, Variant::kGla,
                          Variant::kDeltaNet, Variant::kGdn, Variant::kKda}) {
    const Shape all{opt.prefix + opt.segment, opt.heads, opt.heads, opt.dk, opt.dv};
    const Tokens t = MakeTokens(variant, all, gen);
    const TransitionForm form = linear::TransitionFormOf(variant);
    const int64_t state_floats = int64_t{opt.heads} * opt.dk * opt.dv;
    std::vector<float> truth(state_floats), prefix_state(state_floats), zero(state_floats),
        trans(linear::TransitionFloats(form, all));
    Status st = linear::RecurrentForward(variant, all, InputsOf(t, 0, all), nullptr,
                                         linear::Outputs{nullptr, truth.data(), nullptr, nullptr});
    Shape ps = all, cs = all;
    ps.tokens = opt.prefix;
    cs.tokens = opt.segment;
    if (st.ok()) {
      st = linear::ChunkedForward(variant, ps, InputsOf(t, 0, all), nullptr,
                                  linear::Outputs{nullptr, prefix_state.data(), nullptr, nullptr});
    }
    if (st.ok()) {
      st = linear::ChunkedForward(variant, cs, InputsOf(t, opt.prefix, all), nullptr,
                                  linear::Outputs{nullptr, nullptr, zero.data(), trans.data()});
    }
    if (!st.ok()) {
      fmt::print(stderr, "hypic-op table: {}: {}\n", linear::VariantName(variant), st.ToString());
      return kExitFailure;
    }
    struct Errors {
      std::vector<float> naive, hypic;
    };
    auto compose = [&](const std::vector<float>& t_c, const std::vector<float>& s_c) {
      Errors e{prefix_state, prefix_state};
      linear::NaiveAdd(all, s_c.data(), e.naive.data());
      linear::ApplyTransition(form, all, t_c.data(), s_c.data(), e.hypic.data());
      return e;
    };
    const Errors f32 = compose(trans, zero);
    const Errors bf16 = compose(RoundBf16(trans), RoundBf16(zero));
    auto row = [&](const std::string& heads, int h0, int h1) {
      fmt::print("| {} | {} | {:.2e} | {:.2e} | {:.2e} | {:.2e} |\n", linear::VariantName(variant),
                 heads, RelError(f32.naive, truth, all, h0, h1),
                 RelError(f32.hypic, truth, all, h0, h1), RelError(bf16.naive, truth, all, h0, h1),
                 RelError(bf16.hypic, truth, all, h0, h1));
    };
    if (variant == Variant::kRetNet) {
      for (int h = 0; h < opt.heads; ++h) {
        row(fmt::format("h={} (gamma=1-2^-{})", h, 5 + h), h, h + 1);
      }
    } else {
      row("all", 0, opt.heads);
    }
  }
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand(
    "table", "Naive add vs T-composition state error for every variant (paper's strawman)",
    [](CLI::App& sub) -> Action {
      auto opt = std::make_shared<TableOptions>();
      sub.add_option("--prefix", opt->prefix, "Prefix tokens");
      sub.add_option("--segment", opt->segment, "Segment tokens");
      sub.add_option("--heads", opt->heads, "Heads (H = HV)");
      sub.add_option("--dk", opt->dk, "Key head dim");
      sub.add_option("--dv", opt->dv, "Value head dim");
      sub.add_option("--seed", opt->seed, "Input seed");
      return [opt] { return Table(*opt); };
    });

}  // namespace
}  // namespace hypic::tools::op_table

// FullPrefill against an independent float64 reference of the Qwen3-Next / Qwen3.5 forward pass
// (HF modeling_qwen3_next.py / modeling_qwen3_5.py semantics), written here with plain loops.
// The reference reads the checkpoint by its Hugging Face tensor names and undoes the layouts
// itself (in_proj_qkvz viewed as [H, 2dk + 2(HV/H)dv], q_proj as [nh, 2hd], packed experts), so
// it shares nothing with the loader's layout table or the runtime's kernels.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "gpu/model/config.h"
#include "gpu/model/model.h"
#include "tests/gpu/model/model_test_util.h"
#include "tests/support/seeded_rng.h"

namespace hypic::model {
namespace {

using D = std::vector<double>;
using testing::ScratchDir;
using testing::TinyOptions;

class Reference {
 public:
  Reference(const std::filesystem::path& dir, const ModelConfig& c) : c_(c) {
    auto ck = SafetensorsCheckpoint::Open(dir);
    REQUIRE_OK(ck);
    ck_ = *ck;
    prefix_ = c.format == WeightFormat::kQwen3Next ? "model." : "model.language_model.";
  }

  // Logits [T, vocab].
  D Forward(const std::vector<uint32_t>& tokens) {
    const int64_t T = static_cast<int64_t>(tokens.size()), h = c_.hidden_size;
    const D embed = W(prefix_ + "embed_tokens.weight");
    D x(static_cast<size_t>(T * h));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < h; ++i)
        x[At(t, h, i)] = embed[At(tokens[static_cast<size_t>(t)], h, i)];
    }
    for (int64_t li = 0; li < c_.num_layers; ++li) {
      const std::string p = fmt::format("{}layers.{}.", prefix_, li);
      D xn = NormOnePlus(x, T, h, W(p + "input_layernorm.weight"));
      D y = c_.layer_kinds[static_cast<size_t>(li)] == LayerKind::kLinear ? Gdn(p, xn, T)
                                                                          : Attention(p, xn, T);
      for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
      xn = NormOnePlus(x, T, h, W(p + "post_attention_layernorm.weight"));
      y = c_.mlp_kinds[static_cast<size_t>(li)] == MlpKind::kMoe ? Moe(p + "mlp.", xn, T)
                                                                 : Mlp(p + "mlp.", xn, T);
      for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
    }
    const D xf = NormOnePlus(x, T, h, W(prefix_ + "norm.weight"));
    return Linear(xf, T, h, W("lm_head.weight"), c_.vocab_size);
  }

 private:
  static size_t At(int64_t row, int64_t cols, int64_t col) {
    return static_cast<size_t>(row * cols + col);
  }
  static double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
  static double Silu(double x) { return x * Sigmoid(x); }

  D W(const std::string& name) {
    auto info = ck_->Info(name);
    REQUIRE_MESSAGE(info.ok(), name);
    auto bytes = ck_->ReadCopy(name);
    REQUIRE_OK(bytes);
    const auto n = static_cast<size_t>((*info)->shape.NumElements());
    std::vector<float> f(n);
    ConvertElements((*info)->dtype, bytes->data(), DType::kF32, f.data(), n);
    return D(f.begin(), f.end());
  }

  // x [T, in] times W^T for W [out, in].
  static D Linear(const D& x, int64_t T, int64_t in, const D& w, int64_t out) {
    D y(static_cast<size_t>(T * out), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t o = 0; o < out; ++o) {
        double s = 0.0;
        for (int64_t i = 0; i < in; ++i) s += x[At(t, in, i)] * w[At(o, in, i)];
        y[At(t, out, o)] = s;
      }
    }
    return y;
  }

  // Zero-centred RMSNorm over rows of `dim` (HF Qwen3NextRMSNorm).
  D NormOnePlus(const D& x, int64_t rows, int64_t dim, const D& w) const {
    D y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (int64_t i = 0; i < dim; ++i) ss += x[At(r, dim, i)] * x[At(r, dim, i)];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + c_.rms_norm_eps);
      for (int64_t i = 0; i < dim; ++i)
        y[At(r, dim, i)] = x[At(r, dim, i)] * inv * (1.0 + w[static_cast<size_t>(i)]);
    }
    return y;
  }

  D Gdn(const std::string& p, const D& xn, int64_t T) {
    const int64_t h = c_.hidden_size, H = c_.linear_key_heads, HV = c_.linear_value_heads;
    const int64_t dk = c_.linear_key_dim, dv = c_.linear_value_dim, r = HV / H, K = c_.conv_kernel;
    const int64_t C = 2 * H * dk + HV * dv;
    const std::string la = p + "linear_attn.";
    // mixed [T, C] = [q (all heads) | k | v], z [T, HV*dv], b/a [T, HV].
    D mixed(static_cast<size_t>(T * C)), z(static_cast<size_t>(T * HV * dv));
    D b(static_cast<size_t>(T * HV)), a(static_cast<size_t>(T * HV));
    if (c_.format == WeightFormat::kQwen3Next) {
      const int64_t gw = 2 * dk + 2 * r * dv;
      const D qkvz = Linear(xn, T, h, W(la + "in_proj_qkvz.weight"), H * gw);
      const D ba = Linear(xn, T, h, W(la + "in_proj_ba.weight"), 2 * HV);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t g = 0; g < H; ++g) {
          const double* grp = &qkvz[At(t, H * gw, g * gw)];
          for (int64_t d = 0; d < dk; ++d) {
            mixed[At(t, C, g * dk + d)] = grp[d];
            mixed[At(t, C, H * dk + g * dk + d)] = grp[dk + d];
          }
          for (int64_t j = 0; j < r * dv; ++j) {
            mixed[At(t, C, 2 * H * dk + g * r * dv + j)] = grp[2 * dk + j];
            z[At(t, HV * dv, g * r * dv + j)] = grp[2 * dk + r * dv + j];
          }
          for (int64_t j = 0; j < r; ++j) {
            b[At(t, HV, g * r + j)] = ba[At(t, 2 * HV, g * 2 * r + j)];
            a[At(t, HV, g * r + j)] = ba[At(t, 2 * HV, g * 2 * r + r + j)];
          }
        }
      }
    } else {
      mixed = Linear(xn, T, h, W(la + "in_proj_qkv.weight"), C);
      z = Linear(xn, T, h, W(la + "in_proj_z.weight"), HV * dv);
      b = Linear(xn, T, h, W(la + "in_proj_b.weight"), HV);
      a = Linear(xn, T, h, W(la + "in_proj_a.weight"), HV);
    }
    const D conv_w = W(la + "conv1d.weight");  // [C, 1, K]
    D conv(mixed.size());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t ch = 0; ch < C; ++ch) {
        double s = 0.0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;
          if (src >= 0) s += conv_w[At(ch, K, j)] * mixed[At(src, C, ch)];
        }
        conv[At(t, C, ch)] = Silu(s);
      }
    }
    const D a_log = W(la + "A_log"), dt_bias = W(la + "dt_bias"), norm_w = W(la + "norm.weight");
    D core(static_cast<size_t>(T * HV * dv));
    std::vector<D> state(static_cast<size_t>(HV), D(static_cast<size_t>(dk * dv), 0.0));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t hv = 0; hv < HV; ++hv) {
        const int64_t kh = hv / r;
        D q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk)), v(static_cast<size_t>(dv));
        double qn = 0.0, kn = 0.0;
        for (int64_t d = 0; d < dk; ++d) {
          q[static_cast<size_t>(d)] = conv[At(t, C, kh * dk + d)];
          k[static_cast<size_t>(d)] = conv[At(t, C, H * dk + kh * dk + d)];
          qn += q[static_cast<size_t>(d)] * q[static_cast<size_t>(d)];
          kn += k[static_cast<size_t>(d)] * k[static_cast<size_t>(d)];
        }
        for (int64_t d = 0; d < dk; ++d) {
          q[static_cast<size_t>(d)] /= std::sqrt(qn + 1e-6) * std::sqrt(static_cast<double>(dk));
          k[static_cast<size_t>(d)] /= std::sqrt(kn + 1e-6);
        }
        for (int64_t e = 0; e < dv; ++e)
          v[static_cast<size_t>(e)] = conv[At(t, C, 2 * H * dk + hv * dv + e)];
        const double beta = Sigmoid(b[At(t, HV, hv)]);
        const double av = a[At(t, HV, hv)] + dt_bias[static_cast<size_t>(hv)];
        const double g = -std::exp(a_log[static_cast<size_t>(hv)]) * std::log1p(std::exp(av));
        D& S = state[static_cast<size_t>(hv)];
        for (double& s : S) s *= std::exp(g);
        for (int64_t e = 0; e < dv; ++e) {
          double mem = 0.0;
          for (int64_t d = 0; d < dk; ++d) mem += S[At(d, dv, e)] * k[static_cast<size_t>(d)];
          const double delta = (v[static_cast<size_t>(e)] - mem) * beta;
          for (int64_t d = 0; d < dk; ++d) S[At(d, dv, e)] += k[static_cast<size_t>(d)] * delta;
        }
        double ss = 0.0;
        D o(static_cast<size_t>(dv), 0.0);
        for (int64_t e = 0; e < dv; ++e) {
          for (int64_t d = 0; d < dk; ++d)
            o[static_cast<size_t>(e)] += S[At(d, dv, e)] * q[static_cast<size_t>(d)];
          ss += o[static_cast<size_t>(e)] * o[static_cast<size_t>(e)];
        }
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dv) + c_.rms_norm_eps);
        for (int64_t e = 0; e < dv; ++e) {
          core[At(t, HV * dv, hv * dv + e)] = norm_w[static_cast<size_t>(e)] *
                                              o[static_cast<size_t>(e)] * inv *
                                              Silu(z[At(t, HV * dv, hv * dv + e)]);
        }
      }
    }
    return Linear(core, T, HV * dv, W(la + "out_proj.weight"), h);
  }

  D Attention(const std::string& p, const D& xn, int64_t T) {
    const int64_t h = c_.hidden_size, nh = c_.num_heads, nkv = c_.num_kv_heads, hd = c_.head_dim;
    const std::string sa = p + "self_attn.";
    const D qg = Linear(xn, T, h, W(sa + "q_proj.weight"), 2 * nh * hd);
    D k = Linear(xn, T, h, W(sa + "k_proj.weight"), nkv * hd);
    const D v = Linear(xn, T, h, W(sa + "v_proj.weight"), nkv * hd);
    D q(static_cast<size_t>(T * nh * hd)), gate(q.size());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t hh = 0; hh < nh; ++hh) {
        for (int64_t d = 0; d < hd; ++d) {
          q[At(t, nh * hd, hh * hd + d)] = qg[At(t, 2 * nh * hd, hh * 2 * hd + d)];
          gate[At(t, nh * hd, hh * hd + d)] = qg[At(t, 2 * nh * hd, hh * 2 * hd + hd + d)];
        }
      }
    }
    q = NormOnePlus(q, T * nh, hd, W(sa + "q_norm.weight"));
    k = NormOnePlus(k, T * nkv, hd, W(sa + "k_norm.weight"));
    const int64_t rot = static_cast<int64_t>(static_cast<double>(hd) * c_.partial_rotary_factor);
    auto rope = [&](D& x, int64_t heads) {
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t hh = 0; hh < heads; ++hh) {
          double* v0 = &x[At(t, heads * hd, hh * hd)];
          for (int64_t i = 0; i < rot / 2; ++i) {
            const double ang =
                static_cast<double>(t) *
                std::pow(c_.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(rot));
            const double x1 = v0[i], x2 = v0[i + rot / 2];
            v0[i] = x1 * std::cos(ang) - x2 * std::sin(ang);
            v0[i + rot / 2] = x2 * std::cos(ang) + x1 * std::sin(ang);
          }
        }
      }
    };
    rope(q, nh);
    rope(k, nkv);
    D out(q.size(), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t hh = 0; hh < nh; ++hh) {
        const int64_t g = hh / (nh / nkv);
        D s(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < hd; ++d)
            dot += q[At(t, nh * hd, hh * hd + d)] * k[At(j, nkv * hd, g * hd + d)];
          s[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double sum = 0.0;
        for (double& e : s) sum += e = std::exp(e - mx);
        for (int64_t j = 0; j <= t; ++j) {
          for (int64_t d = 0; d < hd; ++d) {
            out[At(t, nh * hd, hh * hd + d)] +=
                s[static_cast<size_t>(j)] / sum * v[At(j, nkv * hd, g * hd + d)];
          }
        }
        for (int64_t d = 0; d < hd; ++d)
          out[At(t, nh * hd, hh * hd + d)] *= Sigmoid(gate[At(t, nh * hd, hh * hd + d)]);
      }
    }
    return Linear(out, T, nh * hd, W(sa + "o_proj.weight"), h);
  }

  // down(silu(gate x) * up x) for one token.
  static D SwiGlu(const double* x, int64_t h, const double* gw, const double* uw, const double* dw,
                  int64_t im) {
    D act(static_cast<size_t>(im)), y(static_cast<size_t>(h), 0.0);
    for (int64_t i = 0; i < im; ++i) {
      double g = 0.0, u = 0.0;
      for (int64_t j = 0; j < h; ++j) {
        g += gw[i * h + j] * x[j];
        u += uw[i * h + j] * x[j];
      }
      act[static_cast<size_t>(i)] = Silu(g) * u;
    }
    for (int64_t o = 0; o < h; ++o) {
      for (int64_t i = 0; i < im; ++i)
        y[static_cast<size_t>(o)] += dw[o * im + i] * act[static_cast<size_t>(i)];
    }
    return y;
  }

  D Mlp(const std::string& mp, const D& xn, int64_t T) {
    const int64_t h = c_.hidden_size, im = c_.intermediate_size;
    const D g = W(mp + "gate_proj.weight"), u = W(mp + "up_proj.weight"),
            d = W(mp + "down_proj.weight");
    D y(xn.size());
    for (int64_t t = 0; t < T; ++t) {
      const D yt = SwiGlu(&xn[At(t, h, 0)], h, g.data(), u.data(), d.data(), im);
      std::copy(yt.begin(), yt.end(), y.begin() + t * h);
    }
    return y;
  }

  D Moe(const std::string& mp, const D& xn, int64_t T) {
    const int64_t h = c_.hidden_size, E = c_.num_experts, im = c_.moe_intermediate_size;
    const D router = W(mp + "gate.weight");
    std::vector<D> eg(static_cast<size_t>(E)), eu(static_cast<size_t>(E)),
        ed(static_cast<size_t>(E));
    const bool packed = ck_->Info(mp + "experts.gate_up_proj").ok();
    const D gu = packed ? W(mp + "experts.gate_up_proj") : D();
    const D dn = packed ? W(mp + "experts.down_proj") : D();
    for (int64_t e = 0; e < E; ++e) {
      if (packed) {  // gate_up_proj [E, 2I, h]: rows [0, I) gate, [I, 2I) up; down [E, h, I]
        const auto base = gu.begin() + e * 2 * im * h;
        eg[static_cast<size_t>(e)].assign(base, base + im * h);
        eu[static_cast<size_t>(e)].assign(base + im * h, base + 2 * im * h);
        ed[static_cast<size_t>(e)].assign(dn.begin() + e * h * im, dn.begin() + (e + 1) * h * im);
      } else {
        const std::string ep = fmt::format("{}experts.{}.", mp, e);
        eg[static_cast<size_t>(e)] = W(ep + "gate_proj.weight");
        eu[static_cast<size_t>(e)] = W(ep + "up_proj.weight");
        ed[static_cast<size_t>(e)] = W(ep + "down_proj.weight");
      }
    }
    const D sg = W(mp + "shared_expert.gate_proj.weight"),
            su = W(mp + "shared_expert.up_proj.weight");
    const D sd = W(mp + "shared_expert.down_proj.weight"),
            sgate = W(mp + "shared_expert_gate.weight");
    D y(xn.size(), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      const double* x = &xn[At(t, h, 0)];
      D prob(static_cast<size_t>(E));
      double mx = -1e300, sum = 0.0;
      for (int64_t e = 0; e < E; ++e) {
        double l = 0.0;
        for (int64_t j = 0; j < h; ++j) l += router[At(e, h, j)] * x[j];
        prob[static_cast<size_t>(e)] = l;
        mx = std::max(mx, l);
      }
      for (double& p : prob) sum += p = std::exp(p - mx);
      for (double& p : prob) p /= sum;
      std::vector<int64_t> chosen;
      D taken = prob;
      double chosen_sum = 0.0;
      for (int64_t k = 0; k < c_.experts_per_token; ++k) {
        const auto best = std::max_element(taken.begin(), taken.end()) - taken.begin();
        chosen.push_back(best);
        chosen_sum += prob[static_cast<size_t>(best)];
        taken[static_cast<size_t>(best)] = -1.0;
      }
      for (int64_t e : chosen) {
        const double wgt = prob[static_cast<size_t>(e)] / (c_.norm_topk_prob ? chosen_sum : 1.0);
        const D ye =
            SwiGlu(x, h, eg[static_cast<size_t>(e)].data(), eu[static_cast<size_t>(e)].data(),
                   ed[static_cast<size_t>(e)].data(), im);
        for (int64_t i = 0; i < h; ++i) y[At(t, h, i)] += wgt * ye[static_cast<size_t>(i)];
      }
      double gl = 0.0;
      for (int64_t j = 0; j < h; ++j) gl += sgate[static_cast<size_t>(j)] * x[j];
      const D ys =
          SwiGlu(x, h, sg.data(), su.data(), sd.data(), c_.shared_expert_intermediate_size);
      for (int64_t i = 0; i < h; ++i) y[At(t, h, i)] += Sigmoid(gl) * ys[static_cast<size_t>(i)];
    }
    return y;
  }

  ModelConfig c_;
  std::shared_ptr<const SafetensorsCheckpoint> ck_;
  std::string prefix_;
};

void CheckAgainstReference(const TinyOptions& o, int64_t n_tokens) {
  ScratchDir dir;
  auto model = testing::LoadTiny(dir.path(), o);
  hypic::testing::SeededRng rng(7);
  const auto tokens =
      rng.Tokens(static_cast<size_t>(n_tokens), static_cast<uint32_t>(model->config().vocab_size));
  auto ours = model->FullPrefill(tokens, {.all_logits = true, .want_state = false});
  REQUIRE_OK(ours);
  REQUIRE(ours->rows == n_tokens);
  Reference ref(dir.path(), model->config());
  const D want = ref.Forward(tokens);
  REQUIRE(want.size() == ours->logits.size());
  double max_diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(want[i] - ours->logits[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  MESSAGE("max |dlogit| = " << max_diff << " (max |logit| = " << scale << ")");
  CHECK(scale > 1.0);  // the logits are not degenerate
  CHECK(max_diff / scale < 1e-4);
}

TEST_CASE("FullPrefill matches the float64 reference: qwen3_next, MoE, 70 tokens") {
  CheckAgainstReference({}, 70);  // crosses a 64-token chunk boundary
}

TEST_CASE("FullPrefill matches the float64 reference: qwen3_5, MoE, bf16 weights") {
  CheckAgainstReference({.format = WeightFormat::kQwen35, .dtype = DType::kBF16}, 33);
}

TEST_CASE("FullPrefill matches the float64 reference: dense MLP") {
  CheckAgainstReference({.mlp = MlpKind::kDense, .seed = 3}, 20);
}

}  // namespace
}  // namespace hypic::model

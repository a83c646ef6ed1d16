#include "gpu/model/generator.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <string>

#include "core/hash.h"

namespace hypic::model {
namespace {

namespace fs = std::filesystem;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Fills tensors from per-name counter streams: value i of tensor `name` is a function of
// (seed, name, i) only.
class Filler {
 public:
  explicit Filler(uint64_t seed) : seed_(seed) {}

  // Uniform with the given mean and standard deviation (fp32 weights, as generated).
  void Uniform(const std::string& name, WeightTensor& t, double mean, double stddev) {
    Uniform(name, t.f32(), mean, stddev);
  }
  void Uniform(const std::string& name, std::vector<float>& v, double mean, double stddev) {
    const uint64_t stream = Stream(name);
    const double half_width = stddev * std::sqrt(3.0);
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<float>(mean + half_width * (2.0 * Unit(stream, i) - 1.0));
    }
  }

  // exp(uniform(log lo, log hi)), then `map`.
  template <typename Map>
  void LogUniform(const std::string& name, std::vector<float>& v, double lo, double hi, Map map) {
    const uint64_t stream = Stream(name);
    for (size_t i = 0; i < v.size(); ++i) {
      const double x = std::exp(std::log(lo) + (std::log(hi) - std::log(lo)) * Unit(stream, i));
      v[i] = static_cast<float>(map(x));
    }
  }

 private:
  uint64_t Stream(const std::string& name) const {
    return Xxh3_64(name.data(), name.size()) ^ SplitMix64(seed_);
  }
  static double Unit(uint64_t stream, size_t i) {  // in [0, 1)
    return static_cast<double>(SplitMix64(stream + SplitMix64(i)) >> 11) * 0x1.0p-53;
  }

  uint64_t seed_;
};

void FillMlp(Filler& f, const std::string& name, MlpWeights& m, int64_t hidden, double damp) {
  f.Uniform(name + ".gate_up", m.gate_up, 0.0, 1.0 / std::sqrt(static_cast<double>(hidden)));
  f.Uniform(name + ".down", m.down, 0.0, damp / std::sqrt(static_cast<double>(m.intermediate)));
}

}  // namespace

Result<ModelConfig> PresetConfig(std::string_view preset, WeightFormat format, MlpKind mlp) {
  ModelConfig c;
  c.format = format;
  int64_t interval = 4;
  if (preset == "tiny") {
    c.hidden_size = 64;
    c.num_layers = 4;
    interval = 2;
    c.vocab_size = 512;
    c.linear_key_heads = 2;
    c.linear_value_heads = 4;
    c.linear_key_dim = 16;
    c.linear_value_dim = 16;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 16;
    c.rope_theta = 10000.0;
    c.intermediate_size = 128;
    c.num_experts = 4;
    c.experts_per_token = 2;
    c.moe_intermediate_size = 32;
    c.shared_expert_intermediate_size = 32;
  } else if (preset == "small") {  // TARGETS.md "anchor-small", exactly
    c.hidden_size = 512;
    c.num_layers = 8;
    c.vocab_size = 32000;
    c.linear_key_heads = 4;
    c.linear_value_heads = 8;
    c.linear_key_dim = 64;
    c.linear_value_dim = 64;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.rope_theta = 1e6;
    c.intermediate_size = 1536;
    c.num_experts = 8;
    c.experts_per_token = 2;
    c.moe_intermediate_size = 512;
    c.shared_expert_intermediate_size = 512;
  } else if (preset == "bench") {
    c.hidden_size = 1024;
    c.num_layers = 12;
    c.vocab_size = 32000;
    c.linear_key_heads = 8;
    c.linear_value_heads = 16;
    c.linear_key_dim = 64;
    c.linear_value_dim = 64;
    c.num_heads = 16;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.rope_theta = 1e6;
    c.intermediate_size = 3072;
    c.num_experts = 16;
    c.experts_per_token = 2;
    c.moe_intermediate_size = 1024;
    c.shared_expert_intermediate_size = 1024;
  } else {
    return BadRequest(fmt::format("unknown preset '{}' (want tiny, small or bench)", preset));
  }
  c.conv_kernel = 4;
  c.partial_rotary_factor = 0.25;
  c.rms_norm_eps = 1e-6;
  c.norm_topk_prob = true;
  c.layer_kinds.resize(static_cast<size_t>(c.num_layers));
  c.mlp_kinds.assign(static_cast<size_t>(c.num_layers), mlp);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    c.layer_kinds[static_cast<size_t>(i)] =
        (i + 1) % interval == 0 ? LayerKind::kFullAttention : LayerKind::kLinear;
  }
  if (mlp == MlpKind::kDense) {
    c.num_experts = 0;
    c.experts_per_token = 0;
    c.moe_intermediate_size = 0;
    c.shared_expert_intermediate_size = 0;
  }
  HYPIC_RETURN_IF_ERROR(c.Validate());
  return c;
}

ModelWeights GenerateWeights(const ModelConfig& c, uint64_t seed) {
  ModelWeights w = AllocateWeights(c);
  Filler f(seed);
  const double h = static_cast<double>(c.hidden_size);
  const double fan_in = 1.0 / std::sqrt(h);
  const double damp = 1.0 / std::sqrt(2.0 * static_cast<double>(c.num_layers));
  constexpr double kNormStd = 0.1;  // zero-centred norms: (1 + w) stays near 1

  f.Uniform("embed", w.embed, 0.0, 1.0);
  f.Uniform("final_norm", w.final_norm, 0.0, kNormStd);
  if (!w.lm_head.empty()) f.Uniform("lm_head", w.lm_head, 0.0, 3.0 * fan_in);
  for (size_t li = 0; li < w.layers.size(); ++li) {
    LayerWeights& lw = w.layers[li];
    const std::string p = fmt::format("layers.{}.", li);
    f.Uniform(p + "input_norm", lw.input_norm, 0.0, kNormStd);
    f.Uniform(p + "post_norm", lw.post_norm, 0.0, kNormStd);
    if (c.layer_kinds[li] == LayerKind::kLinear) {
      GdnWeights& g = lw.gdn;
      f.Uniform(p + "gdn.in_proj", g.in_proj, 0.0, fan_in);
      f.Uniform(p + "gdn.conv", g.conv, 0.0, 1.0 / std::sqrt(static_cast<double>(c.conv_kernel)));
      f.LogUniform(p + "gdn.A", g.a_log, 1.0, 16.0, [](double a) { return std::log(a); });
      // dt_bias = softplus^-1(dt), so softplus(dt_bias) = dt at a = 0.
      f.LogUniform(p + "gdn.dt", g.dt_bias, 1e-3, 1e-1,
                   [](double dt) { return std::log(std::expm1(dt)); });
      f.Uniform(p + "gdn.norm", g.norm, 1.0, kNormStd);
      f.Uniform(p + "gdn.out_proj", g.out_proj, 0.0,
                damp / std::sqrt(static_cast<double>(c.value_width())));
    } else {
      AttentionWeights& a = lw.attention;
      f.Uniform(p + "attn.in_proj", a.in_proj, 0.0, fan_in);
      f.Uniform(p + "attn.q_norm", a.q_norm, 0.0, kNormStd);
      f.Uniform(p + "attn.k_norm", a.k_norm, 0.0, kNormStd);
      f.Uniform(p + "attn.o_proj", a.o_proj, 0.0,
                damp / std::sqrt(static_cast<double>(c.num_heads * c.head_dim)));
    }
    if (c.mlp_kinds[li] == MlpKind::kMoe) {
      MoeWeights& m = lw.moe;
      f.Uniform(p + "moe.router", m.router, 0.0, 2.0 * fan_in);
      for (size_t e = 0; e < m.experts.size(); ++e) {
        FillMlp(f, fmt::format("{}moe.expert.{}", p, e), m.experts[e], c.hidden_size, damp);
      }
      if (m.shared.intermediate > 0) {
        FillMlp(f, p + "moe.shared", m.shared, c.hidden_size, damp);
        f.Uniform(p + "moe.shared_gate", m.shared_gate, 0.0, fan_in);
      }
    } else {
      FillMlp(f, p + "mlp", lw.dense, c.hidden_size, damp);
    }
  }
  return w;
}

Result<fs::path> EnsureBuiltinModel(std::string_view name, const fs::path& cache_dir) {
  HYPIC_ASSIGN_OR_RETURN(ModelConfig config, PresetConfig(name));
  const fs::path dir = cache_dir / fmt::format("builtin-{}-seed0-qwen3_next-bf16", name);
  std::error_code ec;
  if (fs::exists(dir / "config.json", ec)) return dir;

  static std::atomic<uint64_t> attempt{0};  // distinct temporaries for threads of one process
  const fs::path tmp =
      cache_dir / fmt::format(".builtin-{}-tmp-{}-{}", name, ::getpid(), attempt.fetch_add(1));
  fs::remove_all(tmp, ec);
  HYPIC_RETURN_IF_ERROR(WriteCheckpoint(tmp, config, GenerateWeights(config, 0)));
  fs::rename(tmp, dir, ec);
  if (ec) {
    // Another process won the race: its directory is complete (it has config.json).
    fs::remove_all(tmp, ec);
    if (!fs::exists(dir / "config.json", ec)) {
      return IoError(fmt::format("cannot install built-in model into {}", dir.string()));
    }
  }
  return dir;
}

}  // namespace hypic::model

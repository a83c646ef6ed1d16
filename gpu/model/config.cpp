#include "gpu/model/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace hypic::model {
namespace {

using Json = nlohmann::json;

// Caps on every size a config may ask for. They are far above any real model of this family
// and far below what would overflow the size arithmetic.
constexpr int64_t kMaxHidden = 1 << 16;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxVocab = 1 << 22;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxExperts = 1024;
constexpr int64_t kMaxIntermediate = 1 << 18;
constexpr int64_t kMaxConvKernel = 16;

// Reads fields of one JSON object, remembering the first error so call sites stay flat.
class FieldReader {
 public:
  explicit FieldReader(const Json& obj) : obj_(obj) {}

  int64_t Int(const char* key, int64_t lo, int64_t hi, std::optional<int64_t> fallback) {
    const Json* v = Find(key);
    if (v == nullptr) {
      if (!fallback) Fail(fmt::format("config.json: missing required field '{}'", key));
      return fallback.value_or(0);
    }
    if (!v->is_number_integer()) {
      Fail(fmt::format("config.json: field '{}' must be an integer", key));
      return 0;
    }
    int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX}
                    ? INT64_MAX
                    : v->get<int64_t>();
    if (x < lo || x > hi) {
      Fail(fmt::format("config.json: field '{}' = {} is out of range [{}, {}]", key, x, lo, hi));
    }
    return x;
  }

  double Number(const char* key, double lo, double hi, double fallback) {
    const Json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) {
      Fail(fmt::format("config.json: field '{}' must be a number", key));
      return fallback;
    }
    double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) {
      Fail(fmt::format("config.json: field '{}' = {} is out of range [{}, {}]", key, x, lo, hi));
    }
    return x;
  }

  bool Bool(const char* key, bool fallback) {
    const Json* v = Find(key);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_boolean()) {
      Fail(fmt::format("config.json: field '{}' must be true or false", key));
      return fallback;
    }
    return v->get<bool>();
  }

  std::optional<std::string> String(const char* key) {
    const Json* v = Find(key);
    if (v == nullptr || v->is_null()) return std::nullopt;
    if (!v->is_string()) {
      Fail(fmt::format("config.json: field '{}' must be a string", key));
      return std::nullopt;
    }
    return v->get<std::string>();
  }

  const Json* Find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }

  void Fail(std::string message) {
    if (status_.ok()) status_ = BadRequest(std::move(message));
  }
  void Fail(Status s) {
    if (status_.ok()) status_ = std::move(s);
  }
  const Status& status() const { return status_; }

 private:
  const Json& obj_;
  Status status_;
};

Status CheckDivides(int64_t a, const char* a_name, int64_t b, const char* b_name) {
  if (a <= 0 || b % a != 0) {
    return BadRequest(
        fmt::format("config.json: '{}' ({}) must divide '{}' ({})", a_name, a, b_name, b));
  }
  return Status::Ok();
}

}  // namespace

std::string_view WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kQwen3Next: return "qwen3_next";
    case WeightFormat::kQwen35: return "qwen3_5";
  }
  return "?";
}

Result<WeightFormat> WeightFormatFromName(std::string_view name) {
  if (name == "qwen3_next") return WeightFormat::kQwen3Next;
  if (name == "qwen3_5") return WeightFormat::kQwen35;
  return BadRequest(fmt::format("unknown weight format '{}' (want qwen3_next or qwen3_5)", name));
}

int64_t ModelConfig::rotary_dim() const {
  return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

int64_t ModelConfig::num_linear_layers() const {
  int64_t n = 0;
  for (LayerKind k : layer_kinds) n += k == LayerKind::kLinear;
  return n;
}

// Counted in double: exact below 2^53, and a hostile config cannot overflow it.
static double CountParameters(const ModelConfig& c) {
  const auto h = static_cast<double>(c.hidden_size);
  double n = static_cast<double>(c.vocab_size) * h * (c.tie_word_embeddings ? 1 : 2) + h;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    n += 2 * h;  // the two pre-norms
    if (c.layer_kinds[static_cast<size_t>(i)] == LayerKind::kLinear) {
      const auto ch = static_cast<double>(c.conv_channels());
      const auto vw = static_cast<double>(c.value_width());
      const auto nv = static_cast<double>(c.linear_value_heads);
      n += (ch + vw + 2 * nv) * h;  // in_proj qkv|z|b|a
      n += ch * static_cast<double>(c.conv_kernel) + 2 * nv +
           static_cast<double>(c.linear_value_dim) + vw * h;
    } else {
      const auto hd = static_cast<double>(c.head_dim);
      n += static_cast<double>(3 * c.num_heads + 2 * c.num_kv_heads) * hd * h + 2 * hd;
    }
    if (c.mlp_kinds[static_cast<size_t>(i)] == MlpKind::kMoe) {
      const auto e = static_cast<double>(c.num_experts);
      n += e * h + e * 3 * static_cast<double>(c.moe_intermediate_size) * h;
      if (c.shared_expert_intermediate_size > 0) {
        n += 3 * static_cast<double>(c.shared_expert_intermediate_size) * h + h;
      }
    } else {
      n += 3 * static_cast<double>(c.intermediate_size) * h;
    }
  }
  return n;
}

// Far above any model this runtime can hold in memory, far below double's exact range.
constexpr double kMaxParameters = 0x1p40;

int64_t ModelConfig::ParameterCount() const {
  return static_cast<int64_t>(std::min(CountParameters(*this), kMaxParameters));
}

std::string ModelConfig::Canonical() const {
  std::string kinds;
  for (size_t i = 0; i < layer_kinds.size(); ++i) {
    kinds += layer_kinds[i] == LayerKind::kLinear ? 'L' : 'A';
    kinds += mlp_kinds[i] == MlpKind::kMoe ? 'm' : 'd';
  }
  return fmt::format(
      "qwen3-hybrid-v1 hidden={} layers={} vocab={} eps={:.9g} tie={} kinds={} "
      "gdn=({},{},{},{},{}) attn=({},{},{},{:.9g},{:.9g}) mlp=({},{},{},{},{},{})",
      hidden_size, num_layers, vocab_size, rms_norm_eps, tie_word_embeddings, kinds,
      linear_key_heads, linear_value_heads, linear_key_dim, linear_value_dim, conv_kernel,
      num_heads, num_kv_heads, head_dim, partial_rotary_factor, rope_theta, intermediate_size,
      num_experts, experts_per_token, moe_intermediate_size, shared_expert_intermediate_size,
      norm_topk_prob);
}

Status ModelConfig::Validate() const {
  if (static_cast<int64_t>(layer_kinds.size()) != num_layers ||
      static_cast<int64_t>(mlp_kinds.size()) != num_layers) {
    return BadRequest(fmt::format("config.json: 'layer_types' has {} entries, want {}",
                                  layer_kinds.size(), num_layers));
  }
  bool any_linear = false, any_attention = false, any_moe = false, any_dense = false;
  for (size_t i = 0; i < layer_kinds.size(); ++i) {
    any_linear |= layer_kinds[i] == LayerKind::kLinear;
    any_attention |= layer_kinds[i] == LayerKind::kFullAttention;
    any_moe |= mlp_kinds[i] == MlpKind::kMoe;
    any_dense |= mlp_kinds[i] == MlpKind::kDense;
  }
  if (any_linear) {
    HYPIC_RETURN_IF_ERROR(CheckDivides(linear_key_heads, "linear_num_key_heads", linear_value_heads,
                                       "linear_num_value_heads"));
    if (linear_key_dim <= 0 || linear_value_dim <= 0) {
      return BadRequest(
          "config.json: 'linear_key_head_dim' and 'linear_value_head_dim' must be > 0");
    }
  }
  if (any_attention) {
    HYPIC_RETURN_IF_ERROR(
        CheckDivides(num_kv_heads, "num_key_value_heads", num_heads, "num_attention_heads"));
    const int64_t rot = rotary_dim();
    if (rot < 0 || rot > head_dim || rot % 2 != 0) {
      return BadRequest(fmt::format(
          "config.json: 'partial_rotary_factor' {} gives rotary dim {} (head_dim {}); it must "
          "be even and at most head_dim",
          partial_rotary_factor, rot, head_dim));
    }
  }
  if (any_moe) {
    if (experts_per_token < 1 || experts_per_token > num_experts) {
      return BadRequest(
          fmt::format("config.json: 'num_experts_per_tok' {} must be in [1, num_experts={}]",
                      experts_per_token, num_experts));
    }
    if (moe_intermediate_size <= 0) {
      return BadRequest("config.json: 'moe_intermediate_size' must be > 0");
    }
  }
  if (any_dense && intermediate_size <= 0) {
    return BadRequest("config.json: 'intermediate_size' must be > 0 for dense MLP layers");
  }
  if (CountParameters(*this) > kMaxParameters) {
    return BadRequest(
        fmt::format("config.json: {:.3g} parameters is more than this runtime "
                    "supports ({:.3g})",
                    CountParameters(*this), kMaxParameters));
  }
  return Status::Ok();
}

Result<ModelConfig> ParseModelConfig(std::string_view json_text) {
  Json root = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return BadRequest("config.json: not valid JSON");
  if (!root.is_object()) return BadRequest("config.json: the top level must be an object");

  ModelConfig c;
  const Json* text = &root;
  if (auto it = root.find("text_config"); it != root.end()) {
    if (!it->is_object()) return BadRequest("config.json: 'text_config' must be an object");
    text = &*it;
    c.format = WeightFormat::kQwen35;
  } else if (auto mt = root.find("model_type"); mt != root.end() && mt->is_string() &&
                                                mt->get<std::string>().rfind("qwen3_5", 0) == 0) {
    c.format = WeightFormat::kQwen35;
  }

  FieldReader r(*text);
  c.hidden_size = r.Int("hidden_size", 1, kMaxHidden, std::nullopt);
  c.num_layers = r.Int("num_hidden_layers", 1, kMaxLayers, std::nullopt);
  c.vocab_size = r.Int("vocab_size", 1, kMaxVocab, std::nullopt);
  c.rms_norm_eps = r.Number("rms_norm_eps", 0.0, 1.0, 1e-6);
  // Qwen3.5 keeps tie_word_embeddings at the top level; accept either place.
  FieldReader top(root);
  c.tie_word_embeddings = r.Bool("tie_word_embeddings", top.Bool("tie_word_embeddings", false));
  HYPIC_RETURN_IF_ERROR(top.status());

  if (auto act = r.String("hidden_act"); act && *act != "silu") {
    return Unsupported(
        fmt::format("config.json: 'hidden_act' = '{}' (only silu is supported)", *act));
  }
  if (r.Bool("attention_bias", false)) {
    return Unsupported("config.json: 'attention_bias' = true is not supported");
  }

  c.linear_key_heads = r.Int("linear_num_key_heads", 1, kMaxHeads, 16);
  c.linear_value_heads = r.Int("linear_num_value_heads", 1, kMaxHeads, 32);
  c.linear_key_dim = r.Int("linear_key_head_dim", 1, kMaxHeadDim, 128);
  c.linear_value_dim = r.Int("linear_value_head_dim", 1, kMaxHeadDim, 128);
  c.conv_kernel = r.Int("linear_conv_kernel_dim", 1, kMaxConvKernel, 4);

  c.num_heads = r.Int("num_attention_heads", 1, kMaxHeads, std::nullopt);
  c.num_kv_heads = r.Int("num_key_value_heads", 1, kMaxHeads, c.num_heads);
  c.head_dim =
      r.Int("head_dim", 1, kMaxHeadDim,
            c.num_heads > 0 ? std::optional<int64_t>(c.hidden_size / c.num_heads) : std::nullopt);
  if (c.head_dim < 1) r.Fail("config.json: field 'head_dim' must be > 0");

  // RoPE: top-level fields (Qwen3-Next) or a rope_parameters object (Qwen3.5). The multimodal
  // sections of Qwen3.5's mrope collapse to plain RoPE for text, where all three position
  // streams are equal.
  c.rope_theta = r.Number("rope_theta", 1.0, 1e12, 10000.0);
  c.partial_rotary_factor = r.Number("partial_rotary_factor", 0.0, 1.0, 0.25);
  if (const Json* rp = r.Find("rope_parameters"); rp != nullptr && !rp->is_null()) {
    if (!rp->is_object()) return BadRequest("config.json: 'rope_parameters' must be an object");
    FieldReader rr(*rp);
    c.rope_theta = rr.Number("rope_theta", 1.0, 1e12, c.rope_theta);
    c.partial_rotary_factor = rr.Number("partial_rotary_factor", 0.0, 1.0, c.partial_rotary_factor);
    if (auto type = rr.String("rope_type"); type && *type != "default") {
      return Unsupported(
          fmt::format("config.json: 'rope_parameters.rope_type' = '{}' (only "
                      "default is supported)",
                      *type));
    }
    HYPIC_RETURN_IF_ERROR(rr.status());
  }

  c.intermediate_size = r.Int("intermediate_size", 0, kMaxIntermediate, 0);
  c.num_experts = r.Int("num_experts", 0, kMaxExperts, 0);
  c.experts_per_token = r.Int("num_experts_per_tok", 0, kMaxExperts, 0);
  c.moe_intermediate_size = r.Int("moe_intermediate_size", 0, kMaxIntermediate, 0);
  c.shared_expert_intermediate_size =
      r.Int("shared_expert_intermediate_size", 0, kMaxIntermediate, 0);
  c.norm_topk_prob = r.Bool("norm_topk_prob", true);
  const int64_t sparse_step = r.Int("decoder_sparse_step", 1, kMaxLayers, 1);
  const int64_t interval = r.Int("full_attention_interval", 1, kMaxLayers, 4);
  HYPIC_RETURN_IF_ERROR(r.status());

  const auto n = static_cast<size_t>(c.num_layers);
  c.layer_kinds.resize(n);
  if (const Json* lt = r.Find("layer_types"); lt != nullptr && !lt->is_null()) {
    if (!lt->is_array() || lt->size() != n) {
      return BadRequest(fmt::format(
          "config.json: 'layer_types' must be an array of num_hidden_layers = {} strings", n));
    }
    for (size_t i = 0; i < n; ++i) {
      const Json& e = (*lt)[i];
      if (e == "linear_attention") {
        c.layer_kinds[i] = LayerKind::kLinear;
      } else if (e == "full_attention") {
        c.layer_kinds[i] = LayerKind::kFullAttention;
      } else {
        return BadRequest(fmt::format(
            "config.json: 'layer_types[{}]' = {} (want linear_attention or full_attention)", i,
            e.dump()));
      }
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      c.layer_kinds[i] = (static_cast<int64_t>(i) + 1) % interval == 0 ? LayerKind::kFullAttention
                                                                       : LayerKind::kLinear;
    }
  }

  std::vector<bool> mlp_only(n, false);
  if (const Json* mo = r.Find("mlp_only_layers"); mo != nullptr && !mo->is_null()) {
    if (!mo->is_array()) return BadRequest("config.json: 'mlp_only_layers' must be an array");
    for (const Json& e : *mo) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= c.num_layers) {
        return BadRequest(
            fmt::format("config.json: 'mlp_only_layers' entry {} is not a layer index", e.dump()));
      }
      mlp_only[static_cast<size_t>(e.get<int64_t>())] = true;
    }
  }
  c.mlp_kinds.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const bool moe =
        !mlp_only[i] && c.num_experts > 0 && (static_cast<int64_t>(i) + 1) % sparse_step == 0;
    c.mlp_kinds[i] = moe ? MlpKind::kMoe : MlpKind::kDense;
  }

  HYPIC_RETURN_IF_ERROR(c.Validate());
  return c;
}

std::string ModelConfigToJson(const ModelConfig& c) {
  Json t;
  t["hidden_size"] = c.hidden_size;
  t["num_hidden_layers"] = c.num_layers;
  t["vocab_size"] = c.vocab_size;
  t["rms_norm_eps"] = c.rms_norm_eps;
  t["hidden_act"] = "silu";
  t["attention_bias"] = false;
  Json kinds = Json::array();
  for (LayerKind k : c.layer_kinds) {
    kinds.push_back(k == LayerKind::kLinear ? "linear_attention" : "full_attention");
  }
  t["layer_types"] = kinds;
  t["linear_num_key_heads"] = c.linear_key_heads;
  t["linear_num_value_heads"] = c.linear_value_heads;
  t["linear_key_head_dim"] = c.linear_key_dim;
  t["linear_value_head_dim"] = c.linear_value_dim;
  t["linear_conv_kernel_dim"] = c.conv_kernel;
  t["num_attention_heads"] = c.num_heads;
  t["num_key_value_heads"] = c.num_kv_heads;
  t["head_dim"] = c.head_dim;
  t["intermediate_size"] = c.intermediate_size;
  t["num_experts"] = c.num_experts;
  t["num_experts_per_tok"] = c.experts_per_token;
  t["moe_intermediate_size"] = c.moe_intermediate_size;
  t["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
  t["norm_topk_prob"] = c.norm_topk_prob;
  t["decoder_sparse_step"] = 1;
  Json mlp_only = Json::array();
  for (size_t i = 0; i < c.mlp_kinds.size(); ++i) {
    if (c.num_experts > 0 && c.mlp_kinds[i] == MlpKind::kDense) mlp_only.push_back(i);
  }
  t["mlp_only_layers"] = mlp_only;
  const bool moe = c.num_experts > 0;

  Json root;
  if (c.format == WeightFormat::kQwen3Next) {
    t["partial_rotary_factor"] = c.partial_rotary_factor;
    t["rope_theta"] = c.rope_theta;
    t["tie_word_embeddings"] = c.tie_word_embeddings;
    root = std::move(t);
    root["architectures"] = Json::array({"Qwen3NextForCausalLM"});
    root["model_type"] = "qwen3_next";
  } else {
    t["rope_parameters"] = {{"rope_type", "default"},
                            {"rope_theta", c.rope_theta},
                            {"partial_rotary_factor", c.partial_rotary_factor}};
    t["model_type"] = moe ? "qwen3_5_moe_text" : "qwen3_5_text";
    root["text_config"] = std::move(t);
    root["tie_word_embeddings"] = c.tie_word_embeddings;
    root["architectures"] = Json::array(
        {moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration"});
    root["model_type"] = moe ? "qwen3_5_moe" : "qwen3_5";
  }
  return root.dump(2) + "\n";
}

}  // namespace hypic::model

// ModelConfig: the shape of a Qwen3-Next / Qwen3.5 hybrid decoder, parsed from a Hugging Face
// config.json (MATH.md §6). Qwen3.5 nests the text model under "text_config" and may carry RoPE
// settings in "rope_parameters"; both spellings are read. Layer kinds come from "layer_types"
// or, when absent, from "full_attention_interval" (layer i is full attention when
// (i+1) % interval == 0).
//
// The parser is the trust boundary for config files: every field is range-checked (so a
// hostile config cannot ask for absurd allocations) and every error names the offending key.
// Plain value types; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hypic::model {

enum class LayerKind : uint8_t { kLinear = 0, kFullAttention = 1 };
enum class MlpKind : uint8_t { kDense = 0, kMoe = 1 };

// The on-disk naming scheme of a checkpoint.
enum class WeightFormat : uint8_t {
  kQwen3Next = 0,  // model.*, interleaved in_proj_qkvz / in_proj_ba, per-expert tensors
  kQwen35 = 1,     // model.language_model.*, in_proj_qkv/z/b/a, packed experts
};
std::string_view WeightFormatName(WeightFormat f);  // "qwen3_next", "qwen3_5"
Result<WeightFormat> WeightFormatFromName(std::string_view name);

struct ModelConfig {
  WeightFormat format = WeightFormat::kQwen3Next;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t vocab_size = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  std::vector<LayerKind> layer_kinds;
  std::vector<MlpKind> mlp_kinds;

  // Gated DeltaNet layers.
  int64_t linear_key_heads = 0;    // H
  int64_t linear_value_heads = 0;  // HV
  int64_t linear_key_dim = 0;      // dk
  int64_t linear_value_dim = 0;    // dv
  int64_t conv_kernel = 4;         // K

  // Gated full attention.
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  double partial_rotary_factor = 0.25;
  double rope_theta = 10000.0;

  // MLP / MoE.
  int64_t intermediate_size = 0;  // dense MLP layers
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert
  bool norm_topk_prob = true;

  // Derived sizes.
  int64_t rotary_dim() const;  // int(head_dim * partial_rotary_factor)
  int64_t conv_channels() const { return 2 * linear_key_heads * linear_key_dim + value_width(); }
  int64_t value_width() const { return linear_value_heads * linear_value_dim; }
  int64_t num_linear_layers() const;
  // Total parameters of the model (every expert counted). Validate rejects configs above 2^40.
  int64_t ParameterCount() const;

  // A fixed-order text form of every field that changes the computation; the model
  // fingerprint hashes it, so two spellings of one config fingerprint alike.
  std::string Canonical() const;

  // Checks ranges and divisibility; returns kBadRequest naming the field.
  Status Validate() const;
};

// Parses config.json text. Errors: kBadRequest naming the key (bad JSON, missing or mistyped
// field, value out of range), kUnsupported for valid values this runtime does not implement
// (an activation other than silu, attention bias).
Result<ModelConfig> ParseModelConfig(std::string_view json_text);

// Writes `config` as a Hugging Face config.json in its format's layout (text_config nesting
// and rope_parameters for qwen3_5), readable back by ParseModelConfig.
std::string ModelConfigToJson(const ModelConfig& config);

}  // namespace hypic::model

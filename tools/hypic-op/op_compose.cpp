// `hypic-op compose`: one Compose on files, the fixed interface for external checks of the PIC
// path (issue 9):
//   hypic-op compose --model DIR|builtin:NAME --input REQ.json --output OUT.safetensors
//                    [--device cpu|cuda[:N]]
// REQ: {"seam": 8, "mode": "hypic"|"naive"|"oracle"|"full",
//       "parts": [{"kind": "segment"|"raw", "tokens": [...]}, ...]}   (seam defaults to 8)
// Segment parts are prefilled alone (position-independent entries), in `oracle` mode in their
// true context; raw parts are always live. OUT (F32): `logits` [vocab] of the last token,
// `layer.{i}.state` [HV, dk, dv] per linear layer, and `layer.{i}.k` / `layer.{i}.v`
// [n_tokens, n_kv_heads, head_dim] per attention layer (K post-RoPE at absolute positions),
// covering every token. A malformed request, an unknown mode or an out-of-vocabulary token
// exits 2 naming the field; a model error exits 2 with the loader's message; a device that this
// build cannot use (CUDA not built, or no such device) exits 2 naming --device.
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "gpu/model/model.h"
#include "tools/common/subcommand.h"
#include "tools/hypic-op/model_target.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::op_compose {
namespace {

using Json = nlohmann::json;
using model::ComposePart;

struct ComposeOptions {
  ModelTarget target;
  std::string input;
  std::string output;
};

struct Request {
  uint32_t seam = 8;
  model::ComposeMode mode = model::ComposeMode::kHypic;
  std::vector<ComposePart> parts;
};

Result<Request> ParseRequest(const std::string& text, int64_t vocab) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return BadRequest("request: not a JSON object");
  Request r;
  if (auto it = j.find("seam"); it != j.end()) {
    if (!it->is_number_unsigned() || it->get<uint64_t>() > 1u << 20) {
      return BadRequest("request: 'seam' must be an integer in [0, 1048576]");
    }
    r.seam = it->get<uint32_t>();
  }
  auto mode = j.find("mode");
  if (mode == j.end() || !mode->is_string()) return BadRequest("request: 'mode' must be a string");
  auto m = model::ComposeModeFromName(mode->get<std::string>());
  if (!m.ok()) return m.status().WithContext("request: 'mode'");
  r.mode = *m;
  auto parts = j.find("parts");
  if (parts == j.end() || !parts->is_array() || parts->empty()) {
    return BadRequest("request: 'parts' must be a non-empty array");
  }
  for (size_t i = 0; i < parts->size(); ++i) {
    const Json& p = (*parts)[i];
    const std::string field = fmt::format("parts[{}]", i);
    if (!p.is_object()) return BadRequest(fmt::format("request: '{}' must be an object", field));
    ComposePart part;
    auto kind = p.find("kind");
    if (kind != p.end() && *kind == "segment") {
      part.kind = ComposePart::Kind::kSegment;
    } else if (kind != p.end() && *kind == "raw") {
      part.kind = ComposePart::Kind::kRaw;
    } else {
      return BadRequest(fmt::format("request: '{}.kind' must be \"segment\" or \"raw\"", field));
    }
    auto tokens = p.find("tokens");
    if (tokens == p.end() || !tokens->is_array() || tokens->empty()) {
      return BadRequest(fmt::format("request: '{}.tokens' must be a non-empty array", field));
    }
    for (size_t t = 0; t < tokens->size(); ++t) {
      const Json& v = (*tokens)[t];
      if (!v.is_number_unsigned() || v.get<uint64_t>() >= static_cast<uint64_t>(vocab)) {
        return BadRequest(
            fmt::format("request: '{}.tokens[{}]' = {} is not a token id below "
                        "vocab_size {}",
                        field, t, v.dump(), vocab));
      }
      part.tokens.push_back(v.get<uint32_t>());
    }
    r.parts.push_back(std::move(part));
  }
  return r;
}

Status WriteOutput(const std::string& path, const model::Model& m, const model::ComposeResult& r) {
  const model::ModelConfig& c = m.config();
  SafetensorsWriter w;
  auto add = [&w](std::string name, const Shape& shape, std::span<const float> data) {
    return w.Add(std::move(name), DType::kF32, shape, std::as_bytes(data));
  };
  HYPIC_RETURN_IF_ERROR(add("logits", Shape{c.vocab_size}, r.logits));
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const model::LayerState& ls = r.state.layers[static_cast<size_t>(li)];
    if (c.layer_kinds[static_cast<size_t>(li)] == model::LayerKind::kLinear) {
      HYPIC_RETURN_IF_ERROR(add(fmt::format("layer.{}.state", li),
                                Shape{c.linear_value_heads, c.linear_key_dim, c.linear_value_dim},
                                ls.state));
    } else {
      const Shape kv{r.state.n_positions, c.num_kv_heads, c.head_dim};
      HYPIC_RETURN_IF_ERROR(add(fmt::format("layer.{}.k", li), kv, ls.k));
      HYPIC_RETURN_IF_ERROR(add(fmt::format("layer.{}.v", li), kv, ls.v));
    }
  }
  return w.WriteFile(path);
}

int RunCompose(const ComposeOptions& opt) {
  auto bad = [](const Status& s) {
    fmt::print(stderr, "hypic-op compose: {}\n", s.ToString());
    return kExitBadInput;
  };
  std::ifstream in(opt.input, std::ios::binary);
  if (!in) return bad(NotFound(fmt::format("--input: cannot open {}", opt.input)));
  std::stringstream text;
  text << in.rdbuf();
  auto opened = opt.target.Open();
  if (!opened.ok()) return bad(opened.status());
  const model::Model& m = *opened->model;
  const model::ComputeDevice device = opened->device;
  auto req = ParseRequest(text.str(), m.config().vocab_size);
  if (!req.ok()) return bad(req.status());
  Status st = m.PrefillEntries(req->parts, req->mode, {.seam_w = req->seam, .device = device});
  if (!st.ok()) return bad(st);
  auto r = m.Compose(
      req->parts, {.mode = req->mode, .seam_w = req->seam, .want_state = true, .device = device});
  if (!r.ok()) return bad(r.status());
  st = WriteOutput(opt.output, m, *r);
  if (!st.ok()) {
    fmt::print(stderr, "hypic-op compose: {}\n", st.ToString());
    return kExitFailure;
  }
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand(
    "compose", "Run one Compose (full, naive, hypic or oracle) from a JSON request",
    [](CLI::App& sub) -> Action {
      auto opt = std::make_shared<ComposeOptions>();
      opt->target.AddOptions(sub);
      sub.add_option("--input", opt->input, "Request JSON (seam, mode, parts)")->required();
      sub.add_option("--output", opt->output, "Output safetensors (logits, states, K/V)")
          ->required();
      return [opt] { return RunCompose(*opt); };
    });

}  // namespace
}  // namespace hypic::tools::op_compose

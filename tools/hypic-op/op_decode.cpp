// `hypic-op decode`: greedy decoding from a composed state saved by
// `hypicctl compose --save-state` (docs/state-format.md §8), the door for outside checkers into
// the path a frontend takes from a returned state:
//   hypic-op decode --model DIR|builtin:NAME --state STATE.safetensors --tokens N
//                   [--output OUT.safetensors] [--device cpu|cuda[:N]]
// The state file holds `layers.{l}.{state|conv_tail|key|value}` per the state contract,
// `logits` (the last prompt token's row, f32) and the metadata hypic.state_contract and
// hypic.n_tokens (hypic.model_fingerprint, when present, must be this model's). The first token
// is the argmax of `logits`; each next one is the argmax after Model::Extend of the previous.
// Prints {"tokens": [...], "n_positions": ...} as JSON; --output also writes `logits` [N, vocab]
// (the row each token was chosen from). A file that breaks the contract exits 2 naming the
// tensor or the key; another model's state exits 2.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/segment_entry.h"
#include "gpu/model/model.h"
#include "protocol/messages.h"
#include "tools/common/subcommand.h"
#include "tools/hypic-op/model_target.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::op_decode {
namespace {

struct DecodeOptions {
  ModelTarget target;
  std::string state;
  uint32_t tokens = 16;
  std::string output;
};

Result<std::string> Meta(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  if (it == f.metadata().end()) return BadRequest(fmt::format("--state: no metadata '{}'", key));
  return it->second;
}

Result<int64_t> MetaInt(const SafetensorsFile& f, const std::string& key) {
  HYPIC_ASSIGN_OR_RETURN(std::string v, Meta(f, key));
  int64_t out = -1;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size() || out < 0) {
    return BadRequest(fmt::format("--state: metadata '{}' = '{}' is not a count", key, v));
  }
  return out;
}

Result<TensorView> Tensor(const SafetensorsFile& f, const std::string& name) {
  auto v = f.Get(name);
  if (!v.ok()) return v.status().WithContext("--state");
  return v;
}

uint32_t Argmax(std::span<const float> v) {
  return static_cast<uint32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

Status Decode(const DecodeOptions& opt, const model::Model& m, model::ComputeDevice device,
              nlohmann::json* out) {
  const model::ModelConfig& c = m.config();
  HYPIC_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(opt.state));
  HYPIC_ASSIGN_OR_RETURN(int64_t contract, MetaInt(*file, "hypic.state_contract"));
  if (contract != protocol::kStateContractVersion) {
    return BadRequest(fmt::format("--state: state contract version {}; this tool knows {}",
                                  contract, protocol::kStateContractVersion));
  }
  HYPIC_ASSIGN_OR_RETURN(int64_t n, MetaInt(*file, "hypic.n_tokens"));
  if (auto fp = file->metadata().find("hypic.model_fingerprint"); fp != file->metadata().end()) {
    if (fp->second != m.fingerprint().ToHex()) {
      return BadRequest(fmt::format("--state: computed by model {}, but --model is {}", fp->second,
                                    m.fingerprint().ToHex()));
    }
  }
  std::vector<model::StateTensorView> views;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const bool linear = c.layer_kinds[static_cast<size_t>(l)] == model::LayerKind::kLinear;
    for (TensorKind k : linear ? std::vector{TensorKind::kState, TensorKind::kConvTail}
                               : std::vector{TensorKind::kKey, TensorKind::kValue}) {
      HYPIC_ASSIGN_OR_RETURN(TensorView v,
                             Tensor(*file, StateFileTensorName(static_cast<uint32_t>(l), k)));
      views.push_back({static_cast<uint32_t>(l), k, v.dtype(), v.shape(), v.data()});
    }
  }
  if (file->tensors().size() != views.size() + 1) {
    return BadRequest(
        fmt::format("--state: {} tensors, the contract of this model has {} plus "
                    "'logits'",
                    file->tensors().size(), views.size()));
  }
  HYPIC_ASSIGN_OR_RETURN(TensorView lv, Tensor(*file, "logits"));
  if (lv.dtype() != DType::kF32 || !(lv.shape() == Shape{c.vocab_size})) {
    return BadRequest(fmt::format("--state: 'logits' must be F32 [{}], not {} {}", c.vocab_size,
                                  DTypeName(lv.dtype()), lv.shape().ToString()));
  }
  HYPIC_ASSIGN_OR_RETURN(model::ModelState state, m.StateFromTensors(n, views));
  std::vector<float> logits(static_cast<const float*>(lv.data()),
                            static_cast<const float*>(lv.data()) + c.vocab_size);
  std::vector<uint32_t> tokens;
  std::vector<float> rows;
  for (uint32_t step = 0; step < opt.tokens; ++step) {
    uint32_t t = Argmax(logits);
    tokens.push_back(t);
    rows.insert(rows.end(), logits.begin(), logits.end());
    if (step + 1 == opt.tokens) break;
    HYPIC_ASSIGN_OR_RETURN(auto r, m.Extend(state, std::span<const uint32_t>(&t, 1),
                                            {.want_state = true, .device = device}));
    logits.assign(r.logits.end() - c.vocab_size, r.logits.end());
  }
  (*out)["tokens"] = tokens;
  (*out)["n_positions"] = n;
  if (!opt.output.empty()) {
    SafetensorsWriter w;
    HYPIC_RETURN_IF_ERROR(w.Add("logits", DType::kF32,
                                Shape{static_cast<int64_t>(tokens.size()), c.vocab_size},
                                std::as_bytes(std::span<const float>(rows))));
    HYPIC_RETURN_IF_ERROR(w.WriteFile(opt.output));
  }
  return Status::Ok();
}

int RunDecode(const DecodeOptions& opt) {
  auto opened = opt.target.Open();
  if (!opened.ok()) {
    fmt::print(stderr, "hypic-op decode: {}\n", opened.status().ToString());
    return kExitBadInput;
  }
  nlohmann::json out;
  Status st = Decode(opt, *opened->model, opened->device, &out);
  if (!st.ok()) {
    fmt::print(stderr, "hypic-op decode: {}\n", st.ToString());
    return st.code() == StatusCode::kIoError ? kExitFailure : kExitBadInput;
  }
  fmt::print("{}\n", out.dump());
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand(
    "decode", "Greedy-decode N tokens from a composed state (hypicctl compose --save-state)",
    [](CLI::App& sub) -> Action {
      auto opt = std::make_shared<DecodeOptions>();
      opt->target.AddOptions(sub);
      sub.add_option("--state", opt->state, "State safetensors from hypicctl compose --save-state")
          ->required();
      sub.add_option("--tokens", opt->tokens, "Tokens to decode")
          ->check(CLI::Range(1u, 1u << 20))
          ->capture_default_str();
      sub.add_option("--output", opt->output, "Also write the logits [N, vocab] here");
      return [opt] { return RunDecode(*opt); };
    });

}  // namespace
}  // namespace hypic::tools::op_decode

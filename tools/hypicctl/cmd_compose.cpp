// `hypicctl compose PARTS.jsonl`: one COMPOSE from the command line. Each line of PARTS (the
// `warm` format: a JSON array of token ids) is one part, in prompt order; lines are cacheable
// segments except those named by --raw (0-based; default: the last line, the question). Prints
// the parts' outcomes, the top tokens and the timings (--json: as JSON).
//
// --save-state FILE receives the composed state as safetensors (docs/state-format.md §8):
// `layers.{l}.{state|conv_tail|key|value}` in --state-dtype, `logits` (the full last-token row,
// f32), and the metadata hypic.state_contract, hypic.n_tokens, hypic.model_fingerprint,
// hypic.model_name, hypic.mode and hypic.state_dtype. The state is received streamed, layer by
// layer (ComposeStreaming), so it is never held twice; --state-layout first (the default) asks
// for the state-first reply, whose layers leave the daemon as the compose completes each, and
// `head` for the head-first one, whose state leaves after the compose. `hypic-op decode --state
// FILE` decodes from it. --json also reports reply_s (request sent to last reply byte) and,
// with a state, first_layer_s (to layer 0 complete) and state_bytes.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "core/safetensors.h"
#include "core/segment_entry.h"
#include "tools/common/subcommand.h"
#include "tools/hypicctl/command.h"
#include "tools/hypicctl/table.h"
#include "tools/hypicctl/token_lines.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::cmd_compose {
namespace {

struct ComposeCtlOptions {
  CommonOptions common;
  std::string file;
  std::string name_space;
  std::string mode = "hypic";
  uint32_t seam = protocol::kDefaultSeam;
  uint32_t top_k = 5;
  std::vector<size_t> raw;
  std::string save_state;
  std::string state_dtype = "f32";
  std::string state_layout = "first";
};

Result<protocol::ComposeMode> ModeFromName(const std::string& name) {
  for (uint8_t m = 0; m <= protocol::kMaxComposeMode; ++m) {
    auto mode = static_cast<protocol::ComposeMode>(m);
    if (protocol::ComposeModeName(mode) == name) return mode;
  }
  return BadRequest(fmt::format("--mode '{}': want full, naive, hypic, oracle or prefix", name));
}

Result<DType> StateDTypeFromName(const std::string& name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  if (name == "f16") return DType::kF16;
  return BadRequest(fmt::format("--state-dtype '{}': want f32, bf16 or f16", name));
}

Result<protocol::StateLayout> StateLayoutFromName(const std::string& name) {
  if (name == "first") return protocol::StateLayout::kStateFirst;
  if (name == "head") return protocol::StateLayout::kHeadFirst;
  return BadRequest(fmt::format("--state-layout '{}': want first or head", name));
}

int RunCompose(const ComposeCtlOptions& opts) {
  auto bad = [&](const Status& st) {
    fmt::print(stderr, "{}: compose: {}\n", kCtl, st.ToString());
    return kExitBadInput;
  };
  auto lines = ReadTokenLines(opts.file);
  if (!lines.ok()) return OperationFailed(opts.common, "compose", lines.status());
  if (lines->empty()) return bad(BadRequest(fmt::format("{}: no parts", opts.file)));
  auto mode = ModeFromName(opts.mode);
  if (!mode.ok()) return bad(mode.status());
  auto dtype = StateDTypeFromName(opts.state_dtype);
  if (!dtype.ok()) return bad(dtype.status());
  auto layout = StateLayoutFromName(opts.state_layout);
  if (!layout.ok()) return bad(layout.status());
  std::set<size_t> raw(opts.raw.begin(), opts.raw.end());
  if (raw.empty()) raw.insert(lines->size() - 1);
  if (*raw.rbegin() >= lines->size()) {
    return bad(BadRequest(
        fmt::format("--raw {}: there are {} parts (0-based)", *raw.rbegin(), lines->size())));
  }
  protocol::ComposeRequest req;
  req.name_space = opts.name_space;
  req.mode = *mode;
  req.seam_w = opts.seam;
  req.top_k = opts.top_k;
  req.return_state = !opts.save_state.empty();
  for (size_t i = 0; i < lines->size(); ++i) {
    protocol::ComposePart p;
    p.kind = raw.count(i) ? protocol::PartKind::kRaw : protocol::PartKind::kSegmentTokens;
    p.tokens = (*lines)[i];
    req.parts.push_back(std::move(p));
  }
  auto conn = Connect(opts.common, /*need_admin=*/false);
  if (!conn.client) return conn.exit_code;

  Result<protocol::ComposeReply> reply = Internal("unset");
  SafetensorsWriter state;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point sent = Clock::now();
  std::optional<double> first_layer_s;
  uint64_t state_bytes = 0;
  if (req.return_state) {
    protocol::ComposeOptions options{*dtype, protocol::LogitsMode::kFull, *layout};
    reply = conn.client->ComposeStreaming(
        req, options,
        [&](uint32_t layer, std::vector<protocol::OwnedStreamTensor>& tensors) -> Status {
          if (!first_layer_s) {
            first_layer_s = std::chrono::duration<double>(Clock::now() - sent).count();
          }
          for (auto& t : tensors) {
            state_bytes += t.data.size();
            HYPIC_RETURN_IF_ERROR(state.Add(StateFileTensorName(layer, t.kind), t.dtype, t.shape,
                                            std::span<const std::byte>(t.data)));
          }
          return Status::Ok();
        });
  } else {
    reply = conn.client->Compose(req);
  }
  const double reply_s = std::chrono::duration<double>(Clock::now() - sent).count();
  if (!reply.ok()) return OperationFailed(opts.common, "compose", reply.status());
  if (req.return_state) {
    const auto& hello = *conn.client->hello_reply();
    state.SetMetadata("hypic.state_contract", std::to_string(hello.state_contract));
    state.SetMetadata("hypic.n_tokens", std::to_string(reply->n_tokens));
    state.SetMetadata("hypic.model_fingerprint", hello.model_fingerprint.ToHex());
    state.SetMetadata("hypic.model_name", hello.model_name);
    state.SetMetadata("hypic.mode", std::string(protocol::ComposeModeName(*mode)));
    state.SetMetadata("hypic.state_dtype", std::string(DTypeName(*dtype)));
    Status st = state.Add("logits", DType::kF32, Shape{static_cast<int64_t>(reply->logits.size())},
                          std::as_bytes(std::span<const float>(reply->logits)));
    if (st.ok()) st = state.WriteFile(opts.save_state);
    if (!st.ok()) {
      fmt::print(stderr, "{}: compose: --save-state {}: {}\n", kCtl, opts.save_state,
                 st.ToString());
      return kExitFailure;
    }
  }
  const auto& t = reply->timings;
  if (opts.common.json) {
    nlohmann::json parts = nlohmann::json::array();
    for (const auto& p : reply->parts) {
      parts.push_back({{"outcome", p.outcome == protocol::PartOutcome::kHit    ? "hit"
                                   : p.outcome == protocol::PartOutcome::kMiss ? "miss"
                                                                               : "live"},
                       {"tier", protocol::TierName(p.tier)},
                       {"n_tokens", p.n_tokens}});
    }
    nlohmann::json top = nlohmann::json::array();
    for (const auto& l : reply->top) top.push_back({{"token", l.token}, {"logit", l.logit}});
    nlohmann::json j = {{"n_tokens", reply->n_tokens},
                        {"parts", parts},
                        {"top", top},
                        {"probe_us", t.probe_us},
                        {"prefill_us", t.prefill_us},
                        {"transfer_us", t.transfer_us},
                        {"compose_us", t.compose_us},
                        {"total_us", t.total_us}};
    j["reply_s"] = reply_s;  // request sent -> last reply byte, as this client saw it
    if (req.return_state) {
      j["state_file"] = opts.save_state;
      j["state_bytes"] = state_bytes;
      j["first_layer_s"] = first_layer_s.value_or(reply_s);  // request sent -> layer 0 whole
    }
    PrintJson(j);
    return kExitOk;
  }
  int hits = 0;
  for (const auto& p : reply->parts) hits += p.outcome == protocol::PartOutcome::kHit ? 1 : 0;
  fmt::print("composed {} tokens from {} parts ({} hits) in {}\n", reply->n_tokens,
             reply->parts.size(), hits, HumanDuration(static_cast<double>(t.total_us) / 1e6));
  for (const auto& l : reply->top) fmt::print("  token {:>8}  logit {:.4f}\n", l.token, l.logit);
  if (req.return_state) fmt::print("state written to {}\n", opts.save_state);
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand(
    "compose", "COMPOSE a prompt from a JSONL file of parts; --save-state writes the state",
    [](CLI::App& sub) -> Action {
      auto opts = std::make_shared<ComposeCtlOptions>();
      AddCommonOptions(sub, opts->common);
      sub.add_option("file", opts->file,
                     "PARTS.jsonl, one JSON array of token ids per part (- = stdin)")
          ->required();
      sub.add_option("--raw", opts->raw,
                     "0-based parts that are raw (live, never cached); default: the last");
      sub.add_option("--mode", opts->mode, "full, naive, hypic, oracle or prefix")
          ->capture_default_str();
      sub.add_option("--namespace", opts->name_space, "namespace of the segments");
      sub.add_option("--seam", opts->seam, "seam window w (default: the daemon's)");
      sub.add_option("--top-k", opts->top_k, "top logits to print")
          ->check(CLI::Range(0u, protocol::kMaxTopK))
          ->capture_default_str();
      sub.add_option("--save-state", opts->save_state,
                     "write the composed state and logits here (safetensors, "
                     "docs/state-format.md)");
      sub.add_option("--state-dtype", opts->state_dtype, "dtype of the saved state: f32, bf16, f16")
          ->capture_default_str();
      sub.add_option("--state-layout", opts->state_layout,
                     "first: each layer leaves as the compose has it; head: after the compose")
          ->capture_default_str();
      return [opts] { return RunCompose(*opts); };
    });

}  // namespace
}  // namespace hypic::tools::cmd_compose

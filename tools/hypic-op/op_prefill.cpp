// `hypic-op prefill`: one FullPrefill on a model directory, the fixed interface for external
// checks of the forward pass (issue 4):
//   hypic-op prefill --model DIR|builtin:NAME --tokens 1,2,3,... --output OUT.safetensors
//                    [--device cpu|cuda[:N]]
// OUT holds `logits` [T, vocab] F32 for every position. Bad flags, tokens, model or device (CUDA
// not built, or no such device): exit 2 with a message naming the field (or the loader's
// message).
#include <fmt/format.h>

#include <charconv>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "gpu/model/model.h"
#include "tools/common/subcommand.h"
#include "tools/hypic-op/model_target.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::op_prefill {
namespace {

struct PrefillOptions {
  ModelTarget target;
  std::string tokens;
  std::string output;
};

Result<std::vector<uint32_t>> ParseTokens(const std::string& text) {
  std::vector<uint32_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find(',', pos), text.size());
    uint32_t v = 0;
    const char* b = text.data() + pos;
    const char* e = text.data() + end;
    auto [ptr, ec] = std::from_chars(b, e, v);
    if (ec != std::errc() || ptr != e || b == e) {
      return BadRequest(fmt::format("--tokens: entry {} ('{}') is not a token id", out.size(),
                                    std::string(b, e)));
    }
    out.push_back(v);
    pos = end + 1;
  }
  return out;
}

int RunPrefill(const PrefillOptions& opt) {
  auto bad = [](const Status& s) {
    fmt::print(stderr, "hypic-op prefill: {}\n", s.ToString());
    return kExitBadInput;
  };
  auto tokens = ParseTokens(opt.tokens);
  if (!tokens.ok()) return bad(tokens.status());
  auto opened = opt.target.Open();
  if (!opened.ok()) return bad(opened.status());
  const model::Model& m = *opened->model;
  auto r =
      m.FullPrefill(*tokens, {.all_logits = true, .want_state = false, .device = opened->device});
  if (!r.ok()) return bad(r.status().WithContext("--tokens"));
  SafetensorsWriter w;
  Status st = w.Add("logits", DType::kF32, Shape{r->rows, m.config().vocab_size},
                    std::as_bytes(std::span<const float>(r->logits)));
  if (st.ok()) st = w.WriteFile(opt.output);
  if (!st.ok()) {
    fmt::print(stderr, "hypic-op prefill: {}\n", st.ToString());
    return kExitFailure;
  }
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand(
    "prefill", "Run FullPrefill on a model; write logits [T, vocab]", [](CLI::App& sub) -> Action {
      auto opt = std::make_shared<PrefillOptions>();
      opt->target.AddOptions(sub);
      sub.add_option("--tokens", opt->tokens, "Comma-separated token ids")->required();
      sub.add_option("--output", opt->output, "Output safetensors (logits)")->required();
      return [opt] { return RunPrefill(*opt); };
    });

}  // namespace
}  // namespace hypic::tools::op_prefill

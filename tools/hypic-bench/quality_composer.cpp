#include "tools/hypic-bench/quality_composer.h"

#include <fmt/format.h>

#include <optional>
#include <utility>

namespace hypic::tools {
namespace {

using model::ComposeMode;
using model::ComposePart;

class InProcess final : public PromptComposer {
 public:
  InProcess(const model::Model& model, model::ComputeDevice device, EntryDTypes entry_dtypes)
      : model_(model), device_(device), entry_dtypes_(entry_dtypes) {}

  void Start(const QualityPrompt& prompt) override {
    prompt_ = &prompt;
    key_.reset();
    parts_.clear();
  }

  Result<ComposedPrompt> Compose(const QualityRun& run) override {
    HYPIC_ASSIGN_OR_RETURN(const std::vector<ComposePart>* parts, Parts(run));
    HYPIC_ASSIGN_OR_RETURN(
        auto r,
        model_.Compose(
            *parts, {.mode = run.mode, .seam_w = run.seam, .want_state = true, .device = device_}));
    return ComposedPrompt{std::move(r.logits), std::move(r.state)};
  }

 private:
  // The prompt's parts for `run`, with entries for every mode but full: position-independent
  // ones per seam (naive and hypic share them), in-context ones for oracle. Only the last set is
  // kept (entries of a large model are large): the evaluator groups its runs by seam.
  Result<const std::vector<ComposePart>*> Parts(const QualityRun& run) {
    const ComposeMode entries = run.mode == ComposeMode::kFull     ? ComposeMode::kFull
                                : run.mode == ComposeMode::kOracle ? ComposeMode::kOracle
                                                                   : ComposeMode::kHypic;
    const auto key = std::make_pair(entries, run.seam);
    if (key_ == key) return &parts_;
    key_.reset();
    std::vector<ComposePart> parts;
    if (!prompt_->prefix.empty()) parts.push_back({ComposePart::Kind::kRaw, prompt_->prefix, {}});
    for (const auto& seg : prompt_->segments) {
      parts.push_back({ComposePart::Kind::kSegment, seg, {}});
    }
    parts.push_back({ComposePart::Kind::kRaw, prompt_->suffix, {}});
    if (entries != ComposeMode::kFull) {
      HYPIC_RETURN_IF_ERROR(model_.PrefillEntries(
          parts, entries, {.seam_w = run.seam, .device = device_, .entry_dtypes = entry_dtypes_}));
    }
    parts_ = std::move(parts);
    key_ = key;
    return &parts_;
  }

  const model::Model& model_;
  const model::ComputeDevice device_;
  const EntryDTypes entry_dtypes_;
  const QualityPrompt* prompt_ = nullptr;
  std::optional<std::pair<ComposeMode, uint32_t>> key_;  // what parts_ holds entries for
  std::vector<ComposePart> parts_;
};

class OverDaemon final : public PromptComposer {
 public:
  OverDaemon(const model::Model& model, std::unique_ptr<client::Client> client,
             std::string name_space)
      : model_(model), client_(std::move(client)), name_space_(std::move(name_space)) {}

  void Start(const QualityPrompt& prompt) override { prompt_ = &prompt; }

  Result<ComposedPrompt> Compose(const QualityRun& run) override {
    protocol::ComposeRequest req;
    req.name_space = name_space_;
    req.mode = static_cast<protocol::ComposeMode>(run.mode);  // the same numbering
    req.seam_w = run.seam;
    req.return_state = true;
    if (!prompt_->prefix.empty())
      req.parts.push_back({protocol::PartKind::kRaw, {}, prompt_->prefix});
    for (const auto& seg : prompt_->segments) {
      req.parts.push_back({protocol::PartKind::kSegmentTokens, {}, seg});
    }
    req.parts.push_back({protocol::PartKind::kRaw, {}, prompt_->suffix});
    HYPIC_ASSIGN_OR_RETURN(auto reply,
                           client_->Compose(req, {DType::kF32, protocol::LogitsMode::kFull}));
    HYPIC_ASSIGN_OR_RETURN(auto tensors, client::DecodeState(reply));
    std::vector<model::StateTensorView> views;
    views.reserve(tensors.size());
    for (const auto& t : tensors) {
      views.push_back({t.layer, t.kind, t.dtype, t.shape, t.data.data()});
    }
    HYPIC_ASSIGN_OR_RETURN(auto state, model_.StateFromTensors(reply.n_tokens, views));
    if (reply.logits.size() != static_cast<size_t>(model_.config().vocab_size)) {
      return Corruption(fmt::format("COMPOSE returned {} logits, the vocabulary has {}",
                                    reply.logits.size(), model_.config().vocab_size));
    }
    return ComposedPrompt{std::move(reply.logits), std::move(state)};
  }

 private:
  const model::Model& model_;
  std::unique_ptr<client::Client> client_;
  const std::string name_space_;
  const QualityPrompt* prompt_ = nullptr;
};

}  // namespace

std::unique_ptr<PromptComposer> InProcessComposer(const model::Model& model,
                                                  model::ComputeDevice device,
                                                  EntryDTypes entry_dtypes) {
  return std::make_unique<InProcess>(model, device, entry_dtypes);
}

Result<std::unique_ptr<PromptComposer>> DaemonComposer(const model::Model& model,
                                                       const client::ClientOptions& options,
                                                       std::string name_space) {
  HYPIC_ASSIGN_OR_RETURN(auto client, client::Client::Connect(options));
  const protocol::HelloReply& hello = *client->hello_reply();
  if (hello.model_fingerprint != model.fingerprint()) {
    return BadRequest(fmt::format(
        "the daemon at {} runs model '{}' (fingerprint {}), --model is {}: load the same "
        "checkpoint with the same weights dtype",
        options.address, hello.model_name, hello.model_fingerprint.ToHex(),
        model.fingerprint().ToHex()));
  }
  return std::unique_ptr<PromptComposer>(
      std::make_unique<OverDaemon>(model, std::move(client), std::move(name_space)));
}

}  // namespace hypic::tools

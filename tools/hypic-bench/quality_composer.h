// Where `hypic-bench quality` composes its prompts (docs/quality.md): in this process with
// Model::Compose, or through a running hypicd with COMPOSE (return_state, the full logits row;
// docs/state-format.md), whose state is loaded into the same model here so the answer is
// decoded locally either way. A composer turns one prompt of the data set plus one run (a mode
// at a seam width) into the last prompt token's logits and the state after the prompt.
//
// Ownership: a composer borrows the model (which must outlive it) and, between Start and the
// next Start, the prompt. Thread-safety: none; the evaluator gives each worker its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "core/segment_entry.h"
#include "core/status.h"
#include "gpu/model/model.h"
#include "tools/hypic-bench/quality_data.h"

namespace hypic::tools {

// One row of the report: a compose mode at a seam width w (0 for full and oracle).
struct QualityRun {
  model::ComposeMode mode = model::ComposeMode::kFull;
  uint32_t seam = 0;
  friend bool operator==(const QualityRun&, const QualityRun&) = default;
};

struct ComposedPrompt {
  std::vector<float> logits;  // [vocab]: the last prompt token's
  model::ModelState state;    // after every prompt token
};

class PromptComposer {
 public:
  virtual ~PromptComposer() = default;
  // The next Compose calls are of `prompt` (REQUIRES: it lives until the next Start); what was
  // kept of the previous prompt is dropped.
  virtual void Start(const QualityPrompt& prompt) = 0;
  // REQUIRES: Start was called. Errors: the model's or the daemon's.
  virtual Result<ComposedPrompt> Compose(const QualityRun& run) = 0;
};

// In process, on `device`. Entries are prefilled in `entry_dtypes` and kept while consecutive
// runs need them: naive and hypic at one seam share them, as a cache would (oracle's are in
// context). Only one set is held at a time.
std::unique_ptr<PromptComposer> InProcessComposer(const model::Model& model,
                                                  model::ComputeDevice device,
                                                  EntryDTypes entry_dtypes);

// Through the hypicd at `options.address`, one connection per composer, segments sent by their
// tokens in namespace `name_space` (the daemon caches them as for any client). The state comes
// in f32; the daemon's own settings (entry dtypes, weights) decide what it computes. Errors: the
// client's from Connect (kIoError and the like when the daemon cannot be reached), kBadRequest when
// the daemon runs another model than `model` (their fingerprints differ).
[[nodiscard]] Result<std::unique_ptr<PromptComposer>> DaemonComposer(
    const model::Model& model, const client::ClientOptions& options, std::string name_space);

}  // namespace hypic::tools

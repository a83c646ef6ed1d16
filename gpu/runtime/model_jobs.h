// The model adapter of the scatter/combine path: PrefillJobs that run the model's
// SegmentPrefill, the cost shape of a model for the CostModel's prior, and ColdCompose, the
// cold path of a COMPOSE request: its missing segments are scattered over the MissScheduler's
// workers (single-flight, LPT), every entry streams to this thread as soon as it is done, and
// Compose (the combine) runs when the last one has arrived.
//
// Thread-safety: the functions are thread-safe; the model is shared (immutable) and every job
// keeps it alive.
#pragma once

#include <memory>
#include <vector>

#include "gpu/model/model.h"
#include "gpu/runtime/cost_model.h"
#include "gpu/runtime/miss_scheduler.h"
#include "gpu/runtime/prefill_job.h"

namespace hypic::runtime {

// FLOPs of one segment prefill per token and per causal (query, key) pair, from the shape
// (active parameters only: top-k experts plus the shared one).
CostShape CostShapeOf(const model::ModelConfig& config);

// A job computing the entry of `tokens`; its key is SegmentKey::Compute over the model's
// fingerprint, `options` (namespace, seam, format) and the tokens. The model runs on CPU
// workers; a CUDA worker fails the job with kUnsupported until the model has a CUDA path.
PrefillJob MakeSegmentJob(std::shared_ptr<const model::Model> model, std::vector<uint32_t> tokens,
                          const model::SegmentOptions& options);

struct ColdComposeReport {
  size_t misses = 0;       // segment parts prefilled through the scheduler
  MissTimings miss;        // of the scattered prefills
  double compose_s = 0.0;  // the combine
  double total_s = 0.0;    // from the call to the logits (the cold TTFT)
};

// Fills the entry of every segment part that has none and is longer than the seam (the misses;
// hits arrive with their entry from the store), then composes. kBadRequest for kOracle (oracle
// entries depend on their context and cannot be scattered) or when the segment options'
// seam differs from the compose options'; the scheduler's errors otherwise (kBusy,
// kComputeFailed, kDeadlineExceeded, ...).
Result<model::ComposeResult> ColdCompose(MissScheduler& scheduler,
                                         const std::shared_ptr<const model::Model>& model,
                                         std::vector<model::ComposePart> parts,
                                         const model::ComposeOptions& options,
                                         const model::SegmentOptions& segment_options,
                                         Clock::time_point deadline,
                                         ColdComposeReport* report = nullptr);

}  // namespace hypic::runtime

// The model adapter of the scatter/combine path: PrefillJobs that run the model's
// SegmentPrefill, the cost shape of a model for the CostModel's prior, and ColdCompose, the
// cold path of a COMPOSE request: its missing segments are scattered over the MissScheduler's
// workers (single-flight, LPT), every entry streams to this thread as soon as it is done, and
// the combine folds the prompt in order while the rest still computes (streamed combine), so
// that after the last entry only the last fold steps and the suffix remain.
//
// Fold steps (gpu/runtime/fold.h): the prompt is cut into groups of parts fixed by the prompt
// alone, each folded with Model::ComposeAfter once its entries are there (and, by the
// FoldPolicy, a worker is idle). As the cuts do not depend on arrival times or on the worker
// count, the logits are bitwise the same for any number of workers and any timing (at the
// same BLAS thread budget), and within float rounding of a one-shot Compose.
//
// Thread-safety: the functions are thread-safe; the model is shared (immutable) and every job
// keeps it alive.
#pragma once

#include <memory>
#include <vector>

#include "gpu/model/model.h"
#include "gpu/runtime/cost_model.h"
#include "gpu/runtime/fold.h"
#include "gpu/runtime/miss_scheduler.h"
#include "gpu/runtime/prefill_job.h"

namespace hypic::runtime {

// FLOPs of one segment prefill per token and per causal (query, key) pair, from the shape
// (active parameters only: top-k experts plus the shared one).
CostShape CostShapeOf(const model::ModelConfig& config);

// A job computing the entry of `tokens`; its key is SegmentKey::Compute over the model's
// fingerprint, `options` (namespace, seam, format, entry dtypes) and the tokens. The prefill runs
// on the device of the worker that takes the job (options.device is replaced by it), within the
// worker's compute-thread budget; a remote worker asks its peer for the job's `segment` instead.
PrefillJob MakeSegmentJob(std::shared_ptr<const model::Model> model, std::vector<uint32_t> tokens,
                          const model::SegmentOptions& options);

struct ColdComposeReport {
  size_t misses = 0;       // segment parts prefilled through the scheduler
  MissTimings miss;        // of the scattered prefills
  size_t fold_steps = 0;   // ComposeAfter calls (1 for a one-shot Compose)
  double fold_s = 0.0;     // folding before the last entry arrived
  double compose_s = 0.0;  // the combine left after the last arrival
  double total_s = 0.0;    // from the call to the logits (the cold TTFT)
};

// Fills the entry of every segment part that has none and is longer than the seam (the misses;
// hits arrive with their entry from the store) and composes, folding by `fold` (a request
// without misses composes at once). The default, kAtEnd, composes exactly as a warm request
// does, so a prompt's logits are bitwise the same cold and warm (hypicd's end-to-end tests
// check that); kWhenIdle is the faster cold path (fold.h) and rounds differently (< 1e-5). The
// combine runs on the calling thread with a CPU worker's compute budget (ScopedComputeThreads).
// options.on_layer receives each layer of the final state once, from the pass that completes
// the prompt (the last fold step), never from an earlier fold.
// kBadRequest for kOracle (oracle entries depend on their context and cannot be scattered) or when
// the segment options' seam differs from the compose options'; the scheduler's errors otherwise
// (kBusy, kComputeFailed, kDeadlineExceeded, ...).
Result<model::ComposeResult> ColdCompose(
    MissScheduler& scheduler, const std::shared_ptr<const model::Model>& model,
    std::vector<model::ComposePart> parts, const model::ComposeOptions& options,
    const model::SegmentOptions& segment_options, Clock::time_point deadline,
    ColdComposeReport* report = nullptr, FoldPolicy fold = FoldPolicy::kAtEnd);

}  // namespace hypic::runtime

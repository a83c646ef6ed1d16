// PrefillJob: one missing segment to compute, as the MissScheduler sees it. The scheduler is
// generic over the work: a job is a key (for single-flight), a length (for the cost model) and
// a function that produces the entry on whichever worker it lands. gpu/runtime/model_jobs.h
// builds jobs that run the model's SegmentPrefill; tests build synthetic ones. A model job also
// carries its segment's description (SegmentSpec), so a remote worker (a peer daemon) can ask
// for the same entry over the wire instead of running `compute`.
// Value type; the function must be safe to call from any worker thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/segment_entry.h"
#include "core/segment_key.h"
#include "core/status.h"
#include "gpu/backend.h"

namespace hypic::runtime {

using EntryPtr = std::shared_ptr<const SegmentEntry>;
using Clock = std::chrono::steady_clock;

// What a segment job computes, as a peer daemon's PREFILL names it: the entry of `tokens` in
// `name_space` at seam `seam_w` (the peer uses its own entry dtypes, which the returned key
// must match).
struct SegmentSpec {
  std::string name_space;
  uint32_t seam_w = 0;
  std::vector<uint32_t> tokens;
};

// Where a job runs: handed to the job's function by the worker that executes it.
struct WorkerContext {
  int index = 0;  // the worker's index in its pool
  gpu::BackendKind kind = gpu::BackendKind::kCpu;
  int device = 0;
  gpu::Backend* backend = nullptr;  // never null inside a job
  gpu::Stream* stream = nullptr;    // the worker's own stream; never null inside a job
  int compute_threads = 1;          // the compute threads this worker may use (see worker.h)
};

struct PrefillJob {
  SegmentKey key;
  uint32_t n_tokens = 0;
  // Estimated seconds; <= 0 asks the scheduler's CostModel (the usual case).
  double cost = 0.0;
  // Produces the entry. An error fails every request waiting for this key (COMPUTE_FAILED).
  std::function<Result<EntryPtr>(const WorkerContext&)> compute;
  // The segment, for remote workers; null for jobs only a local worker can run.
  std::shared_ptr<const SegmentSpec> segment;
  // Only local workers may run it: a peer's PREFILL for a router, which must not be forwarded
  // to the peer's own peers.
  bool local_only = false;
};

}  // namespace hypic::runtime

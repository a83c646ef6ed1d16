// A discrete-event simulator of the cold path: the misses of one request are assigned to m
// workers by a Policy (over estimated costs), each worker prefills its segments in order (with
// their real costs), each finished entry is transferred to the combine, and the combine either
// runs once after the last arrival or folds the prompt in steps as the entries arrive (the
// streamed combine of gpu/runtime/fold.h, eagerly or only while a worker is idle). It predicts
// cold TTFT for worker counts this machine does not have, from per-segment costs measured here
// (hypic-bench scatter-sim), and is validated against measured runs of the real MissScheduler.
//
// Cores: with `cores` = 0 every worker and the combine run on a core (or device) of their own;
// otherwise they share that many cores as a fluid (processor sharing: k runnable threads on
// c < k cores each run at c/k speed), which is how a fold that runs while every core prefills
// slows the workers down on a CPU machine.
//
// Workers: by default every worker is local, at the speed the segments' costs were measured
// at. `worker_models` gives each its own speed (a job takes compute_s / speed) and marks peer
// daemons (issue 18): a peer computes on its own cores (outside `cores`), then sends the entry
// back over `network`, the router's ingress link that every peer shares first come first
// served, and takes its next job only once its entry has arrived (one remote PREFILL at a time
// per connection). The assignment sees each worker's cost of a job, the transfer included, as
// the MissScheduler's cost matrix does.
//
// Transfer model: an entry of B bytes takes latency + B / bandwidth. Where the transport runs
// on the worker's own thread (HostTransport), the copy occupies the worker; otherwise (the device
// transport, its own streams) the entries share the combine's ingress link, first come first
// served, and the worker goes on computing. Streaming can be switched off to model the synchronous
// burst at the end that streaming avoids. Pure function; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gpu/runtime/assignment.h"

namespace hypic::runtime {

struct SimSegment {
  uint32_t n_tokens = 0;
  double compute_s = 0.0;   // what the prefill really takes
  double estimate_s = 0.0;  // what the scheduler believes (the assignment uses this)
  size_t bytes = 0;         // entry size
};

struct TransferModel {
  double latency_s = 0.0;
  double bytes_per_s = 0.0;  // 0 = instantaneous
  bool on_worker = true;     // the copy occupies the worker (HostTransport) vs. a shared link
};

struct SimWorker {
  double speed = 1.0;   // relative to the segments' compute_s; > 0
  bool remote = false;  // a peer daemon: its entries come back over SimOptions::network
};

// One step of a streamed combine: it may start once the first `need` segments (in request
// order) have arrived and the previous step is done, and takes `seconds` of one core.
struct FoldStep {
  size_t need = 0;
  double seconds = 0.0;
};

struct SimOptions {
  int workers = 1;
  Policy policy = Policy::kLpt;
  TransferModel transfer;
  bool streamed = true;    // false: every transfer waits until all compute is done
  double combine_s = 0.0;  // the one-shot combine after the last arrival (when `fold` is empty)
  // The streamed combine's steps in prompt order; the last needs every segment.
  std::vector<FoldStep> fold;
  bool fold_when_idle =
      false;      // steps start only while some worker is idle (FoldPolicy::kWhenIdle)
  int cores = 0;  // 0: a core per thread; else the threads share this many cores
  // One per worker when set (then its size is `workers`); empty: all local at speed 1.
  std::vector<SimWorker> worker_models;
  TransferModel network;  // remote workers' entries (on_worker is ignored)
};

struct SimResult {
  double ttft_s = 0.0;          // when the last combine step ended
  double compute_span_s = 0.0;  // when the last prefill finished
  double last_arrival_s = 0.0;
  std::vector<double> worker_busy_s;  // compute (+ on-worker copies) per worker
};

// REQUIRES: options.workers >= 1; worker_models empty or of size workers, speeds > 0.
SimResult SimulateCold(std::span<const SimSegment> segments, const SimOptions& options);

}  // namespace hypic::runtime

// A discrete-event simulator of the cold path: the misses of one request are assigned to m
// workers by a Policy (over estimated costs), each worker prefills its segments in order (with
// their real costs), each finished entry is transferred to the combine, and the combine runs
// when the last entry has arrived. It predicts cold TTFT for worker counts this machine does
// not have, from per-segment costs measured here (hypic-bench scatter-sim), and is validated
// against measured runs of the real MissScheduler.
//
// Transfer model: an entry of B bytes takes latency + B / bandwidth. Where the transport runs
// on the worker's own thread (HostTransport), the copy occupies the worker; otherwise (NCCL,
// its own stream) the entries share the combine's ingress link, first come first served, and
// the worker goes on computing. Streaming can be switched off to model the synchronous burst
// at the end that streaming avoids. Pure function; thread-safe.
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

struct SimOptions {
  int workers = 1;
  Policy policy = Policy::kLpt;
  TransferModel transfer;
  bool streamed = true;    // false: every transfer waits until all compute is done
  double combine_s = 0.0;  // the combine (Compose) after the last arrival
};

struct SimResult {
  double ttft_s = 0.0;          // last arrival + combine
  double compute_span_s = 0.0;  // when the last prefill finished
  double last_arrival_s = 0.0;
  std::vector<double> worker_busy_s;  // compute (+ on-worker copies) per worker
};

// REQUIRES: options.workers >= 1.
SimResult SimulateCold(std::span<const SimSegment> segments, const SimOptions& options);

}  // namespace hypic::runtime

// The open-loop driver of `hypic-bench trace`: issues request i at its scheduled time
// (run start + schedule[i]) from a pool of worker threads (one daemon connection each) and
// times it from that SCHEDULED start, not from when a worker got to it. A system that falls
// behind therefore shows the queueing it causes, instead of slowing the load generator down
// with it (no coordinated omission).
//
// An overloaded run would take as long as its backlog; once any request's latency exceeds
// `abort_after_s` the run is cut short: requests not yet issued are marked not completed
// (latency +inf in the statistics), and requests in flight finish normally.
// RunOpenLoop blocks until every worker has finished; `issue` is called concurrently from
// different workers, each with its own worker index.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"

namespace hypic::tools {

struct RequestTiming {
  double scheduled_s = 0;  // relative to the run's start
  double issued_s = 0;     // when a worker sent it (>= scheduled_s)
  double done_s = 0;       // when its reply arrived
  bool completed = false;  // false: not issued (run cut short) or failed
  Status status;           // the failure, when issued and failed

  // From the scheduled start; +inf when not completed.
  double Latency() const;
};

struct OpenLoopOptions {
  size_t workers = 8;
  double abort_after_s = 0;  // 0: never cut the run short
};

// issue(worker, index) sends request `index` and blocks until its reply (first token) is in.
using IssueFn = std::function<Status(size_t worker, size_t index)>;

std::vector<RequestTiming> RunOpenLoop(std::span<const double> schedule_s,
                                       const OpenLoopOptions& options, const IssueFn& issue);

}  // namespace hypic::tools

// Latency statistics and the sustainable-QPS search of `hypic-bench trace`.
//
// A request that never completed (the run was cut short once the system was clearly
// overloaded) has latency +infinity: it counts against every percentile above its rank, so an
// overloaded run can never look good by dropping its slowest requests.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"

namespace hypic::tools {

struct LatencySummary {
  size_t count = 0;                                     // requests, completed or not
  size_t failed = 0;                                    // latency +inf (not completed, or an error)
  double p50 = 0, p90 = 0, p99 = 0, mean = 0, max = 0;  // seconds; mean over completed ones
};

// Linear interpolation between closest ranks (numpy's default), q in [0, 1].
// REQUIRES: `sorted` ascending and non-empty.
double Percentile(std::span<const double> sorted, double q);

LatencySummary SummarizeLatencies(std::vector<double> latencies_s);

// The empirical CDF at up to `max_points` evenly spaced ranks: (latency, fraction <= latency).
// Infinite latencies are left out, so the curve ends below 1 when requests failed.
std::vector<std::pair<double, double>> LatencyCdf(std::vector<double> latencies_s,
                                                  size_t max_points);

struct QpsProbe {
  double qps = 0;
  double p99_s = 0;
  bool meets_slo = false;
};

struct QpsSearchResult {
  double sustainable_qps = 0;    // the highest probed rate that met the SLO; 0 if none did
  std::vector<QpsProbe> probes;  // in the order they ran
};

// Finds the highest offered rate whose p99 stays within `slo_s`. `known` are probes that
// already ran (e.g. the measured run at its offered rate): they seed the bracket and count as
// probes of the result, not against `max_probes`. Starting at `start_qps` (moved into the
// seeded bracket when it falls outside: twice the best passing rate, half the lowest failing
// one), it doubles the rate until a probe misses the SLO (or halves it until one meets it),
// then bisects between the last passing and the first failing rate, in log space, until the
// two are within `rel_tolerance` of each other or `max_probes` have run. `p99_at` runs one
// probe; its error stops the search and is returned.
Result<QpsSearchResult> SearchSustainableQps(double start_qps, double slo_s, int max_probes,
                                             double rel_tolerance,
                                             const std::function<Result<double>(double)>& p99_at,
                                             std::span<const QpsProbe> known = {});

}  // namespace hypic::tools

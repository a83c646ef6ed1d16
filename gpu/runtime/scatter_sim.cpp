#include "gpu/runtime/scatter_sim.h"

#include <algorithm>
#include <limits>
#include <queue>

namespace hypic::runtime {

namespace {
double TransferSeconds(const TransferModel& t, size_t bytes) {
  double s = t.latency_s;
  if (t.bytes_per_s > 0.0) s += static_cast<double>(bytes) / t.bytes_per_s;
  return s;
}

// A thread of the simulation: runs one task at a time, `left` seconds of work at full speed.
struct Runner {
  bool busy = false;
  double left = 0.0;
};
}  // namespace

SimResult SimulateCold(std::span<const SimSegment> segments, const SimOptions& options) {
  const size_t m = static_cast<size_t>(std::max(1, options.workers));
  const size_t n = segments.size();
  std::vector<double> estimates;
  for (const SimSegment& s : segments) estimates.push_back(s.estimate_s);
  const std::vector<double> zero(m, 0.0);
  const Assignment a = Assign(estimates, zero, options.policy);
  std::vector<FoldStep> fold = options.fold;
  if (fold.empty()) fold.push_back({n, options.combine_s});
  const bool copy_on_worker = options.transfer.on_worker && options.streamed;

  SimResult r;
  r.worker_busy_s.assign(m, 0.0);
  std::vector<Runner> workers(m);
  std::vector<size_t> next(m, 0);  // position in the worker's order of its next (or current) job
  Runner combine;
  size_t step = 0;
  std::vector<bool> arrived(n, false);
  size_t prefix = 0, computed = 0;
  // Entries in flight to the combine: (arrival time, job), earliest first.
  using Arrival = std::pair<double, size_t>;
  std::priority_queue<Arrival, std::vector<Arrival>, std::greater<>> in_flight;
  std::vector<size_t> burst;  // without streaming: entries waiting for the end of compute
  double link_free = 0.0;
  double now = 0.0;

  auto arrive = [&](size_t job) {
    arrived[job] = true;
    r.last_arrival_s = std::max(r.last_arrival_s, now);
    while (prefix < n && arrived[prefix]) ++prefix;
  };
  for (;;) {
    // Start whatever can start now.
    size_t idle = 0;
    for (size_t w = 0; w < m; ++w) {
      if (!workers[w].busy && next[w] < a.order[w].size()) {
        const SimSegment& s = segments[a.order[w][next[w]]];
        workers[w] = {
            true,
            s.compute_s + (copy_on_worker ? TransferSeconds(options.transfer, s.bytes) : 0.0)};
        r.worker_busy_s[w] += workers[w].left;
      }
      if (!workers[w].busy) ++idle;
    }
    if (!combine.busy && step < fold.size() && prefix >= std::min(fold[step].need, n) &&
        (!options.fold_when_idle || idle > 0 || prefix == n)) {
      combine = {true, fold[step].seconds};
    }
    // The next event: a task ends or an entry arrives.
    size_t running = combine.busy ? 1 : 0;
    for (const Runner& w : workers) running += w.busy ? 1 : 0;
    if (running == 0 && in_flight.empty()) break;
    const double speed = options.cores > 0 && running > static_cast<size_t>(options.cores)
                             ? static_cast<double>(options.cores) / static_cast<double>(running)
                             : 1.0;
    double dt = std::numeric_limits<double>::infinity();
    for (const Runner& w : workers) {
      if (w.busy) dt = std::min(dt, w.left / speed);
    }
    if (combine.busy) dt = std::min(dt, combine.left / speed);
    if (!in_flight.empty()) dt = std::min(dt, in_flight.top().first - now);
    now += std::max(dt, 0.0);
    // Tasks that ended (up to rounding) complete now.
    auto advance = [&](Runner& t) {
      if (!t.busy) return false;
      t.left -= dt * speed;
      if (t.left > 1e-12) return false;
      t.busy = false;
      return true;
    };
    for (size_t w = 0; w < m; ++w) {
      if (!advance(workers[w])) continue;
      const size_t job = a.order[w][next[w]++];
      r.compute_span_s = std::max(r.compute_span_s, now);
      ++computed;
      if (!options.streamed) {
        burst.push_back(job);
      } else if (copy_on_worker) {
        arrive(job);
      } else {
        link_free =
            std::max(link_free, now) + TransferSeconds(options.transfer, segments[job].bytes);
        in_flight.push({link_free, job});
      }
    }
    if (!options.streamed && computed == n && !burst.empty()) {
      // The burst: every transfer after the last compute, one after another into the combine.
      double t = now;
      for (size_t job : burst) {
        t += TransferSeconds(options.transfer, segments[job].bytes);
        in_flight.push({t, job});
      }
      burst.clear();
    }
    if (advance(combine)) {
      ++step;
      r.ttft_s = now;
    }
    while (!in_flight.empty() && in_flight.top().first <= now) {
      arrive(in_flight.top().second);
      in_flight.pop();
    }
  }
  r.last_arrival_s = std::max(r.last_arrival_s, r.compute_span_s);
  return r;
}

}  // namespace hypic::runtime

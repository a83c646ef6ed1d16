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
// A peer's worker then waits (not computing) until its entry has crossed the network.
struct Runner {
  bool busy = false;
  double left = 0.0;
  bool waiting = false;
  double until = 0.0;  // when waiting: the arrival of its entry
};
}  // namespace

SimResult SimulateCold(std::span<const SimSegment> segments, const SimOptions& options) {
  const size_t m = static_cast<size_t>(std::max(1, options.workers));
  const size_t n = segments.size();
  std::vector<SimWorker> model = options.worker_models;
  model.resize(m);  // the unset ones: local, speed 1
  CostMatrix costs(n, m);
  for (size_t i = 0; i < n; ++i) {
    for (size_t w = 0; w < m; ++w) {
      costs(i, w) = segments[i].estimate_s / model[w].speed +
                    (model[w].remote ? TransferSeconds(options.network, segments[i].bytes) : 0.0);
    }
  }
  const std::vector<double> zero(m, 0.0);
  const Assignment a = Assign(costs, zero, options.policy);
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
  double link_free = 0.0;     // the local shared link (transfer, not on the worker)
  double network_free = 0.0;  // the router's ingress link from the peers
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
      if (!workers[w].busy && !workers[w].waiting && next[w] < a.order[w].size()) {
        const SimSegment& s = segments[a.order[w][next[w]]];
        const bool copy = copy_on_worker && !model[w].remote;
        workers[w] = {true, s.compute_s / model[w].speed +
                                (copy ? TransferSeconds(options.transfer, s.bytes) : 0.0)};
        r.worker_busy_s[w] += workers[w].left;
      }
      if (!workers[w].busy && !workers[w].waiting) ++idle;
    }
    if (!combine.busy && step < fold.size() && prefix >= std::min(fold[step].need, n) &&
        (!options.fold_when_idle || idle > 0 || prefix == n)) {
      combine = {true, fold[step].seconds};
    }
    // The next event: a task ends or an entry arrives.
    // Only local threads share the local cores; a peer computes on its own.
    size_t running = combine.busy ? 1 : 0, busy_remote = 0;
    for (size_t w = 0; w < m; ++w) {
      if (!workers[w].busy) continue;
      ++(model[w].remote ? busy_remote : running);
    }
    bool waiting = false;
    for (const Runner& w : workers) waiting = waiting || w.waiting;
    if (running == 0 && busy_remote == 0 && !waiting && in_flight.empty()) break;
    const double shared = options.cores > 0 && running > static_cast<size_t>(options.cores)
                              ? static_cast<double>(options.cores) / static_cast<double>(running)
                              : 1.0;
    auto speed_of = [&](size_t w) { return model[w].remote ? 1.0 : shared; };
    double dt = std::numeric_limits<double>::infinity();
    for (size_t w = 0; w < m; ++w) {
      if (workers[w].busy) dt = std::min(dt, workers[w].left / speed_of(w));
      if (workers[w].waiting) dt = std::min(dt, workers[w].until - now);
    }
    if (combine.busy) dt = std::min(dt, combine.left / shared);
    if (!in_flight.empty()) dt = std::min(dt, in_flight.top().first - now);
    now += std::max(dt, 0.0);
    // Tasks that ended (up to rounding) complete now.
    auto advance = [&](Runner& t, double speed) {
      if (!t.busy) return false;
      t.left -= dt * speed;
      if (t.left > 1e-12) return false;
      t.busy = false;
      return true;
    };
    for (size_t w = 0; w < m; ++w) {
      if (workers[w].waiting && workers[w].until <= now + 1e-12) workers[w].waiting = false;
      if (!advance(workers[w], speed_of(w))) continue;
      const size_t job = a.order[w][next[w]++];
      r.compute_span_s = std::max(r.compute_span_s, now);
      ++computed;
      if (model[w].remote) {
        // The peer's reply: the entry crosses the shared ingress link, then the peer is free.
        network_free =
            std::max(network_free, now) + TransferSeconds(options.network, segments[job].bytes);
        in_flight.push({network_free, job});
        workers[w].waiting = true;
        workers[w].until = network_free;
      } else if (!options.streamed) {
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
    if (advance(combine, shared)) {
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

#include "gpu/runtime/scatter_sim.h"

#include <algorithm>
#include <queue>

namespace hypic::runtime {

namespace {
double TransferSeconds(const TransferModel& t, size_t bytes) {
  double s = t.latency_s;
  if (t.bytes_per_s > 0.0) s += static_cast<double>(bytes) / t.bytes_per_s;
  return s;
}

struct Event {
  double time;
  size_t worker;
  bool operator>(const Event& o) const {
    return time > o.time || (time == o.time && worker > o.worker);
  }
};
}  // namespace

SimResult SimulateCold(std::span<const SimSegment> segments, const SimOptions& options) {
  const size_t m = static_cast<size_t>(std::max(1, options.workers));
  std::vector<double> estimates;
  for (const SimSegment& s : segments) estimates.push_back(s.estimate_s);
  const std::vector<double> zero(m, 0.0);
  const Assignment a = Assign(estimates, zero, options.policy);

  SimResult r;
  r.worker_busy_s.assign(m, 0.0);
  // Events: "worker w finished the job at position next[w]-1 of its order".
  std::vector<size_t> next(m, 0);
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  auto start_next = [&](size_t w, double now) {
    if (next[w] >= a.order[w].size()) return;
    const SimSegment& s = segments[a.order[w][next[w]]];
    events.push({now + s.compute_s, w});
  };
  for (size_t w = 0; w < m; ++w) start_next(w, 0.0);

  // Finished entries in completion order (the link serves them first come first served).
  std::vector<std::pair<double, size_t>> finished;
  while (!events.empty()) {
    Event e = events.top();
    events.pop();
    const size_t job = a.order[e.worker][next[e.worker]++];
    const SimSegment& s = segments[job];
    double free_at = e.time;
    r.worker_busy_s[e.worker] += s.compute_s;
    if (options.transfer.on_worker && options.streamed) {
      double copy = TransferSeconds(options.transfer, s.bytes);
      free_at += copy;
      r.worker_busy_s[e.worker] += copy;
      r.last_arrival_s = std::max(r.last_arrival_s, free_at);
    }
    r.compute_span_s = std::max(r.compute_span_s, e.time);
    finished.emplace_back(e.time, job);
    start_next(e.worker, free_at);
  }

  if (!options.streamed) {
    // The burst: every transfer after the last compute, one after another into the combine.
    double t = r.compute_span_s;
    for (const auto& [done, job] : finished)
      t += TransferSeconds(options.transfer, segments[job].bytes);
    r.last_arrival_s = t;
  } else if (!options.transfer.on_worker) {
    double link_free = 0.0;
    for (const auto& [done, job] : finished) {
      link_free =
          std::max(link_free, done) + TransferSeconds(options.transfer, segments[job].bytes);
    }
    r.last_arrival_s = link_free;
  }
  r.last_arrival_s = std::max(r.last_arrival_s, r.compute_span_s);
  r.ttft_s = r.last_arrival_s + options.combine_s;
  return r;
}

}  // namespace hypic::runtime

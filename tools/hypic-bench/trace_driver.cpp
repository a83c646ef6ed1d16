#include "tools/hypic-bench/trace_driver.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <thread>

namespace hypic::tools {

double RequestTiming::Latency() const {
  return completed ? done_s - scheduled_s : std::numeric_limits<double>::infinity();
}

std::vector<RequestTiming> RunOpenLoop(std::span<const double> schedule_s,
                                       const OpenLoopOptions& options, const IssueFn& issue) {
  using Clock = std::chrono::steady_clock;
  std::vector<RequestTiming> timings(schedule_s.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> aborted{false};
  const Clock::time_point start = Clock::now();
  auto since_start = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };

  auto worker = [&](size_t w) {
    for (;;) {
      // Indices are taken in order, so request i is never issued before request i-1 was taken.
      const size_t i = next.fetch_add(1);
      if (i >= schedule_s.size()) return;
      RequestTiming& t = timings[i];  // each index is written by exactly one worker
      t.scheduled_s = schedule_s[i];
      // Short naps, so that a cut-short run does not wait out the rest of its schedule.
      for (double wait = schedule_s[i] - since_start(); wait > 0 && !aborted.load();
           wait = schedule_s[i] - since_start()) {
        std::this_thread::sleep_for(std::chrono::duration<double>(std::min(wait, 0.02)));
      }
      if (aborted.load()) continue;
      t.issued_s = since_start();
      // A backlog this deep already means the run is over the limit.
      if (options.abort_after_s > 0 && t.issued_s - t.scheduled_s > options.abort_after_s) {
        aborted.store(true);
        continue;
      }
      t.status = issue(w, i);
      t.done_s = since_start();
      t.completed = t.status.ok();
      if (options.abort_after_s > 0 && t.done_s - t.scheduled_s > options.abort_after_s) {
        aborted.store(true);
      }
    }
  };
  const size_t n_workers = std::max<size_t>(1, std::min(options.workers, schedule_s.size()));
  std::vector<std::thread> threads;
  threads.reserve(n_workers);
  for (size_t w = 0; w < n_workers; ++w) threads.emplace_back(worker, w);
  for (auto& t : threads) t.join();
  return timings;
}

}  // namespace hypic::tools

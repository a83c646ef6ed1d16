// Timing helpers shared by the hypic-bench subcommands: a wall + CPU timing pair, and the median
// (or, for a peak, the fastest) of repeated runs. On a shared, oversubscribed machine the CPU
// figure is the stable one, so every benchmark reports both. Header-only; thread-compatible.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <thread>
#include <utility>
#include <vector>

namespace hypic::tools {

// Which CPU time a benchmark reports: the whole process (all threads: the compute budget's OpenMP
// team) or only the calling thread (a benchmark that pins its work to one thread).
enum class CpuClock { kProcess, kThread };

inline double CpuSeconds(CpuClock clock) {
  if (clock == CpuClock::kProcess) return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Wall and CPU seconds of one measurement (or of a sum of them).
struct Timing {
  double wall = 0, cpu = 0;
  Timing& operator+=(const Timing& o) {
    wall += o.wall;
    cpu += o.cpu;
    return *this;
  }
};

// Runs `fn` `reps` times and returns the wall and the CPU time of rank `rank` among them (each
// sorted ascending on its own; 0 the fastest). With a `pause`, each run starts after that long
// idle (a sleep outside the timed region): the figure of a service whose requests reach it idle,
// which on some machines is slower than back to back (docs/benchmarks.md, "A warm compose is
// timed back to back"). REQUIRES: 0 <= rank < reps.
template <typename Fn>
Timing RankedTiming(int reps, int rank, CpuClock clock, Fn&& fn,
                    std::chrono::milliseconds pause = {}) {
  std::vector<double> wall, cpu;
  for (int i = 0; i < reps; ++i) {
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
    const auto start = std::chrono::steady_clock::now();
    const double c = CpuSeconds(clock);
    fn();
    cpu.push_back(CpuSeconds(clock) - c);
    wall.push_back(SecondsSince(start));
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  const auto at = static_cast<size_t>(rank);
  return {wall[at], cpu[at]};
}

// The median wall and median CPU time of `reps` runs, each after `pause` idle (REQUIRES:
// reps >= 1).
template <typename Fn>
Timing MedianTiming(int reps, CpuClock clock, Fn&& fn, std::chrono::milliseconds pause = {}) {
  return RankedTiming(reps, reps / 2, clock, std::forward<Fn>(fn), pause);
}

// The fastest wall and fastest CPU time of `reps` runs (REQUIRES: reps >= 1): for a peak, which
// the machine's other jobs can only lower.
template <typename Fn>
Timing FastestTiming(int reps, CpuClock clock, Fn&& fn) {
  return RankedTiming(reps, 0, clock, std::forward<Fn>(fn));
}

// Runs `a` and `b` in turns, `pairs` times, appending each run's timing to `a_runs` and
// `b_runs`. Pair i's two runs see nearly the same machine, so the ratio b_runs[i] / a_runs[i]
// is not biased by a drift of the machine's speed (other jobs, frequency), as two separate
// series of runs would be; take the median of the per-pair ratios (PairedOverheadPct).
template <typename FnA, typename FnB>
void RunInTurns(int pairs, CpuClock clock, FnA&& a, FnB&& b, std::vector<Timing>* a_runs,
                std::vector<Timing>* b_runs) {
  auto time = [clock](auto& fn) {
    const auto start = std::chrono::steady_clock::now();
    const double c = CpuSeconds(clock);
    fn();
    return Timing{SecondsSince(start), CpuSeconds(clock) - c};
  };
  for (int i = 0; i < pairs; ++i) {
    a_runs->push_back(time(a));
    b_runs->push_back(time(b));
  }
}

// The median of `v` (REQUIRES: not empty).
inline double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The median over pairs of 100 (b - a) / a, wall and CPU, for runs made by RunInTurns.
inline Timing PairedOverheadPct(const std::vector<Timing>& a_runs,
                                const std::vector<Timing>& b_runs) {
  std::vector<double> wall, cpu;
  for (size_t i = 0; i < a_runs.size() && i < b_runs.size(); ++i) {
    wall.push_back(100.0 * (b_runs[i].wall - a_runs[i].wall) / a_runs[i].wall);
    cpu.push_back(100.0 * (b_runs[i].cpu - a_runs[i].cpu) / a_runs[i].cpu);
  }
  return {MedianOf(std::move(wall)), MedianOf(std::move(cpu))};
}

// The medians of wall and CPU over `runs` (REQUIRES: not empty).
inline Timing MedianOfRuns(const std::vector<Timing>& runs) {
  std::vector<double> wall, cpu;
  for (const Timing& t : runs) {
    wall.push_back(t.wall);
    cpu.push_back(t.cpu);
  }
  return {MedianOf(std::move(wall)), MedianOf(std::move(cpu))};
}

}  // namespace hypic::tools

// Timing helpers shared by the hypic-bench subcommands: a wall + CPU timing pair and the median
// of repeated runs. On a shared, oversubscribed machine the CPU figure is the stable one, so
// every benchmark reports both. Header-only; thread-compatible.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <vector>

namespace hypic::tools {

// Which CPU time a benchmark reports: the whole process (all threads, e.g. OpenBLAS workers)
// or only the calling thread (a benchmark that pins its work to one thread).
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

// Runs `fn` `reps` times (REQUIRES: reps >= 1) and returns the median wall and median CPU time.
template <typename Fn>
Timing MedianTiming(int reps, CpuClock clock, Fn&& fn) {
  std::vector<double> wall, cpu;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const double c = CpuSeconds(clock);
    fn();
    cpu.push_back(CpuSeconds(clock) - c);
    wall.push_back(SecondsSince(start));
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

}  // namespace hypic::tools

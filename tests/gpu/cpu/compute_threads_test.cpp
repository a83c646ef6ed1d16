// The per-thread compute budget and ParallelFor (gpu/cpu/compute_threads.h).
#include "gpu/cpu/compute_threads.h"

#include <doctest/doctest.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace hypic::cpu {
namespace {

TEST_CASE("ScopedComputeThreads overrides the budget of its own thread only") {
  const int global = ComputeThreads();
  {
    ScopedComputeThreads one(1);
    CHECK(ComputeThreads() == 1);
    {
      ScopedComputeThreads three(3);
      CHECK(ComputeThreads() == 3);
    }
    CHECK(ComputeThreads() == 1);
    int other = 0;
    std::thread([&] { other = ComputeThreads(); }).join();
    CHECK(other == global);
    // With a 1-thread budget ParallelFor runs inline on the caller, in one range.
    const auto caller = std::this_thread::get_id();
    int calls = 0;
    bool inline_run = true;
    ParallelFor(1 << 20, 1, [&](int64_t b, int64_t e) {
      ++calls;
      inline_run = inline_run && std::this_thread::get_id() == caller && b == 0 && e == (1 << 20);
    });
    CHECK(calls == 1);
    CHECK(inline_run);
  }
  CHECK(ComputeThreads() == global);
  ScopedComputeThreads zero(0);  // clamps to one thread
  CHECK(ComputeThreads() == 1);
}

TEST_CASE("ParallelFor covers [0, n) once, on as many threads as the budget, each at budget 1") {
  for (int budget : {2, 3}) {
    ScopedComputeThreads scoped(budget);
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    std::set<std::thread::id> threads;
    bool inner_budget_one = true;
    constexpr int64_t n = 1000;
    ParallelFor(n, 1, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      ranges.emplace_back(b, e);
      threads.insert(std::this_thread::get_id());
      inner_budget_one = inner_budget_one && ComputeThreads() == 1;
    });
    std::sort(ranges.begin(), ranges.end());
    INFO("budget ", budget);
    REQUIRE(ranges.size() == static_cast<size_t>(budget));
    CHECK(threads.size() == static_cast<size_t>(budget));
    CHECK(ranges.front().first == 0);
    CHECK(ranges.back().second == n);
    for (size_t i = 1; i < ranges.size(); ++i) CHECK(ranges[i].first == ranges[i - 1].second);
    CHECK(inner_budget_one);
    CHECK(ComputeThreads() == budget);  // restored on the caller
  }
}

TEST_CASE("ParallelFor runs short loops inline and skips empty ones") {
  ScopedComputeThreads scoped(4);
  int calls = 0;
  ParallelFor(100, 64, [&](int64_t b, int64_t e) {  // 100 < 2 * 64: one range
    ++calls;
    CHECK(b == 0);
    CHECK(e == 100);
    CHECK(ComputeThreads() == 1);
  });
  CHECK(calls == 1);
  ParallelFor(0, 1, [&](int64_t, int64_t) { ++calls; });
  CHECK(calls == 1);
}

// A product whose exact value is subnormal: 2^-70 * 2^-70 = 2^-140 (the smallest normal float
// is 2^-126). volatile keeps the compiler from folding it.
float SubnormalProduct() {
  volatile float a = std::ldexp(1.0f, -70);
  volatile float b = std::ldexp(1.0f, -70);
  return a * b;
}

// A subnormal input times 1: DAZ reads it as zero.
float SubnormalTimesOne() {
  volatile float a = std::ldexp(1.0f, -140);
  volatile float one = 1.0f;
  return a * one;
}

TEST_CASE("ParallelFor ranges flush denormals; the caller's mode is restored after") {
  REQUIRE(SubnormalProduct() == std::ldexp(1.0f, -140));  // IEEE gradual underflow outside
  for (int budget : {1, 2}) {
    ScopedComputeThreads scoped(budget);
    std::mutex mu;
    int ranges = 0, flushed = 0;
    ParallelFor(64, 1, [&](int64_t, int64_t) {
      const bool flush = SubnormalProduct() == 0.0f && SubnormalTimesOne() == 0.0f;
      std::lock_guard<std::mutex> lock(mu);
      ++ranges;
      flushed += flush ? 1 : 0;
    });
    INFO("budget ", budget);
#if defined(__x86_64__) || defined(__i386__)
    CHECK(flushed == ranges);
#endif
    CHECK(SubnormalProduct() == std::ldexp(1.0f, -140));
    CHECK(SubnormalTimesOne() == std::ldexp(1.0f, -140));
  }
}

TEST_CASE("ScopedFlushDenormals nests and restores the previous mode") {
  {
    ScopedFlushDenormals outer;
    {
      ScopedFlushDenormals inner;
#if defined(__x86_64__) || defined(__i386__)
      CHECK(SubnormalProduct() == 0.0f);
#endif
    }
#if defined(__x86_64__) || defined(__i386__)
    CHECK(SubnormalProduct() == 0.0f);  // still the outer guard's mode
#endif
  }
  CHECK(SubnormalProduct() == std::ldexp(1.0f, -140));
}

TEST_CASE("UsableCores follows the affinity mask, not the machine's core count") {
  cpu_set_t all;
  REQUIRE(sched_getaffinity(0, sizeof(all), &all) == 0);
  CHECK(UsableCores() == CPU_COUNT(&all));
  // A thread pinned to one core (as taskset -c pins a process) counts one: UsableCores reads
  // the calling thread's mask, so the test pins a thread of its own.
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  int pinned = 0;
  std::thread t([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (sched_setaffinity(0, sizeof(one), &one) == 0) pinned = UsableCores();
  });
  t.join();
  CHECK(pinned == 1);
}

}  // namespace
}  // namespace hypic::cpu

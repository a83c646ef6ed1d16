// The per-thread compute budget and ParallelFor (gpu/cpu/compute_threads.h).
#include "gpu/cpu/compute_threads.h"

#include <doctest/doctest.h>

#include <algorithm>
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

}  // namespace
}  // namespace hypic::cpu

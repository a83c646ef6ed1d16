// ComputeQueue: BUSY at once when full, deadline-expired tasks not run, Close/Stop cancel the
// waiting tasks with SHUTTING_DOWN, every task called exactly once, depth reported.
#include "server/compute_queue.h"

#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <thread>

namespace hypic::server {
namespace {

using namespace std::chrono_literals;
using Clock = ComputeQueue::Clock;

TEST_CASE("full queue answers BUSY at once; waiting tasks run in order") {
  std::atomic<int64_t> max_depth{0};
  ComputeQueue q(1, 2, [&](int64_t d) {
    int64_t m = max_depth.load();
    while (d > m && !max_depth.compare_exchange_weak(m, d)) {
    }
  });
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<bool> started{false};
  std::vector<int> order;
  std::mutex order_mu;
  auto far = Clock::now() + 60s;
  REQUIRE(q.Submit(far, [&](Status st) {
             CHECK(st.ok());
             started = true;
             gate.wait();
           }).ok());
  while (!started) std::this_thread::sleep_for(1ms);
  for (int i = 0; i < 2; ++i) {
    REQUIRE(q.Submit(far, [&, i](Status st) {
               CHECK(st.ok());
               std::lock_guard<std::mutex> lock(order_mu);
               order.push_back(i);
             }).ok());
  }
  auto t0 = Clock::now();
  Status busy = q.Submit(far, [](Status) { FAIL("a refused task must not be called"); });
  CHECK(busy.code() == StatusCode::kBusy);
  CHECK(Clock::now() - t0 < 100ms);
  CHECK(q.depth() == 3);
  release.set_value();
  // Stop would cancel tasks still waiting: let the worker drain them first.
  for (int i = 0; i < 5000 && q.depth() > 0; ++i) std::this_thread::sleep_for(1ms);
  q.Stop();
  std::lock_guard<std::mutex> lock(order_mu);
  CHECK(order == std::vector<int>{0, 1});
  CHECK(max_depth.load() == 3);
  CHECK(q.depth() == 0);
}

TEST_CASE("a task whose deadline passed while waiting gets DEADLINE_EXCEEDED") {
  ComputeQueue q(1, 4);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<bool> started{false};
  REQUIRE(q.Submit(Clock::now() + 60s, [&](Status) {
             started = true;
             gate.wait();
           }).ok());
  while (!started) std::this_thread::sleep_for(1ms);
  std::promise<Status> got;
  REQUIRE(q.Submit(Clock::now() + 5ms, [&](Status st) { got.set_value(st); }).ok());
  std::this_thread::sleep_for(20ms);
  release.set_value();
  CHECK(got.get_future().get().code() == StatusCode::kDeadlineExceeded);
}

TEST_CASE("Close cancels waiting tasks with SHUTTING_DOWN and refuses new ones") {
  ComputeQueue q(1, 8);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<bool> started{false};
  std::atomic<int> ran{0}, cancelled{0};
  REQUIRE(q.Submit(Clock::now() + 60s, [&](Status st) {
             CHECK(st.ok());
             started = true;
             gate.wait();
             ++ran;
           }).ok());
  while (!started) std::this_thread::sleep_for(1ms);
  for (int i = 0; i < 5; ++i) {
    REQUIRE(q.Submit(Clock::now() + 60s, [&](Status st) {
               CHECK(st.code() == StatusCode::kShuttingDown);
               ++cancelled;
             }).ok());
  }
  q.Close();
  CHECK(cancelled == 5);
  CHECK(q.Submit(Clock::now() + 60s, [](Status) {}).code() == StatusCode::kShuttingDown);
  release.set_value();  // the running task still finishes
  q.Stop();
  CHECK(ran == 1);
}

}  // namespace
}  // namespace hypic::server

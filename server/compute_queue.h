// ComputeQueue: the bounded queue in front of the compute workers (PREFILL, COMPOSE).
//
// Submit never blocks: when `capacity` tasks are already waiting it fails at once with kBusy,
// so an overloaded daemon answers BUSY instead of building an unbounded backlog (RELIABILITY
// row 10). A task whose deadline has passed while it waited is not run: it is called with
// kDeadlineExceeded instead, so the caller replies without doing the work. Close() calls every
// waiting task with kShuttingDown; Stop() also joins the workers once the running tasks return.
//
// Every task is called exactly once, on a worker thread (or, when cancelled, on the thread
// calling Close/Stop). Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/thread_annotations.h"

namespace hypic::server {

class ComputeQueue {
 public:
  using Clock = std::chrono::steady_clock;
  // Called with OK to run the work, or with the reason it will not run.
  using Task = std::function<void(Status)>;
  // Observes the depth (waiting + running) after every change; may be empty.
  using DepthObserver = std::function<void(int64_t)>;

  ComputeQueue(uint32_t workers, uint32_t capacity, DepthObserver observer = {});
  ~ComputeQueue();
  ComputeQueue(const ComputeQueue&) = delete;
  ComputeQueue& operator=(const ComputeQueue&) = delete;

  // kBusy when full, kShuttingDown after Stop. On failure the task is not called.
  Status Submit(Clock::time_point deadline, Task task) EXCLUDES(mu_);

  // Rejects new tasks and calls every waiting task with kShuttingDown; running tasks go on.
  // Does not block.
  void Close() EXCLUDES(mu_);
  // Close, then join the workers once the running tasks return.
  void Stop() EXCLUDES(mu_);

  int64_t depth() const EXCLUDES(mu_);

 private:
  struct Item {
    Clock::time_point deadline;
    Task task;
  };
  void WorkerLoop() EXCLUDES(mu_);
  void Publish(int64_t depth) const;

  const uint32_t capacity_;
  const DepthObserver observer_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Item> waiting_ GUARDED_BY(mu_);
  int64_t running_ GUARDED_BY(mu_) = 0;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace hypic::server

// MissScheduler: computes the missing segments of requests on a WorkerPool.
//
// - Single-flight: a key is prefilled at most once at a time; a request that misses a key
//   already queued or running joins it, and every waiter gets the entry or the error.
// - Assignment: a request's new jobs go to the workers by the configured Policy over a cost
//   matrix, on top of the work already queued there (LPT by default): job i on worker j costs
//   Worker::Estimate(job, the local estimate of the CostModel of its kind: CPU or CUDA) (a
//   peer: its own calibrated speed and the network cost of the entry; +infinity where it cannot
//   take the job now).
// - Failover: a job that a remote worker fails (peer down, timeout, refusal, an entry that does
//   not verify) is not failed: it is queued again, first in line, on the worker where it would
//   finish first among those that can take it (local, or another peer), at most once per
//   worker; it fails only when no worker is left. A local worker whose device is lost
//   (Worker::healthy() false after a failure: a sticky CUDA error) is treated alike: its job and
//   every job queued on it run elsewhere, it gets no new job, and stats count it. Other local
//   failures fail at once, as below.
// - Bounded queue: at most `max_queued_jobs` jobs wait (not yet running) over all workers;
//   a Submit whose new jobs do not fit returns kBusy at once and changes nothing.
// - Streamed combine: each worker hands each finished entry at once to the store callback and
//   then to the Transport; the request collects the delivered entries. The combine either
//   follows them as they arrive (WaitFor: the longest arrived prefix of the slots, so it can
//   fold the prompt in order while the rest computes) or takes them all at once (Wait). When
//   Wait returns OK, every entry computed for the request has been offered to the store.
// - Deadlines and cancellation: Wait returns kDeadlineExceeded at the request's deadline, and
//   Cancel (or destroying the request) returns kCancelled; either way the request leaves every
//   job it waited for, and a queued job that nobody waits for any more is dropped, freeing its
//   queue slot. A running job is not interrupted; its entry is still stored.
// - Errors: a failed job fails every request waiting for it with kComputeFailed (the job's
//   message kept) and is never stored; its other jobs continue for their other waiters. A
//   failed transfer fails the waiters with the transport's error; the entry was stored.
//
// Ownership: the scheduler borrows the pool, transport and cost models, which must outlive it.
// A MissRequest must be destroyed before its scheduler. Thread-safety: Submit, Wait, Cancel
// and stats are safe from any thread; each MissRequest is used by one thread at a time. The
// store callback runs on worker threads, without locks held, and delays the delivery of that
// entry: it should take milliseconds, not seconds (or enqueue the insert).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/thread_annotations.h"
#include "gpu/runtime/assignment.h"
#include "gpu/runtime/cost_model.h"
#include "gpu/runtime/prefill_job.h"
#include "gpu/runtime/transport.h"
#include "gpu/runtime/worker.h"

namespace hypic::runtime {

struct SchedulerOptions {
  Policy policy = Policy::kLpt;
  size_t max_queued_jobs = 1024;
};

// Called once per computed key with the worker's entry; see the header comment.
using StoreCallback = std::function<void(const EntryPtr&)>;

struct SchedulerStats {
  uint64_t prefills_ok = 0;
  uint64_t prefills_failed = 0;
  uint64_t jobs_joined = 0;   // misses served by a job already queued or running (or by an
                              // earlier slot of the same request with the same key)
  uint64_t jobs_dropped = 0;  // queued jobs dropped because no request wanted them any more
  uint64_t busy_rejections = 0;
  uint64_t failovers = 0;  // jobs a remote worker or a lost device failed, queued again elsewhere
  uint64_t device_failures = 0;  // jobs that failed on a local worker whose device was lost
  size_t unhealthy_workers = 0;  // local workers out of the pool (device lost)
  size_t queued = 0;             // jobs waiting now
};

// Per-request figures, valid once Wait returned OK.
struct MissTimings {
  double first_arrival_s = 0.0;  // from Submit to the first delivered entry
  double last_arrival_s = 0.0;   // from Submit to the last delivered entry
  double transfer_s = 0.0;       // transport time summed over this request's entries
  // Per worker: the CPU time of the worker threads computing this request's entries. On a
  // machine shared with other load it is the cost a dedicated core would have paid.
  std::vector<double> worker_cpu_s;
  size_t started = 0;  // jobs this request started
  size_t joined = 0;   // jobs it joined
};

class MissScheduler;

// The handle of one submitted request. Destroying it before Wait returned cancels it.
class MissRequest {
 public:
  ~MissRequest();
  MissRequest(const MissRequest&) = delete;
  MissRequest& operator=(const MissRequest&) = delete;

  // Blocks until every entry arrived and returns them in the order of the submitted jobs, or
  // returns the request's error: kComputeFailed, kDeadlineExceeded, kCancelled,
  // kShuttingDown, or the transport's error.
  Result<std::vector<EntryPtr>> Wait();
  // Blocks until the entries of the first `count` slots (in submission order) arrived and,
  // with `idle_worker`, until also some worker of the scheduler has nothing to do (or every
  // entry arrived). Returns how many leading slots have arrived (>= count, clamped to the
  // number of slots), or the request's error as Wait does.
  Result<size_t> WaitFor(size_t count, bool idle_worker = false);
  // The entry of `slot`. REQUIRES: slot < a prefix length returned by WaitFor.
  EntryPtr entry(size_t slot) const;
  // Gives up the request; a concurrent or later Wait returns kCancelled.
  void Cancel();
  MissTimings timings() const;

 private:
  friend class MissScheduler;
  struct State;
  MissRequest(MissScheduler* scheduler, std::unique_ptr<State> state);

  MissScheduler* scheduler_;
  std::unique_ptr<State> state_;
};

class MissScheduler {
 public:
  MissScheduler(WorkerPool& pool, Transport& transport, CostModels& cost_models,
                StoreCallback store, SchedulerOptions options = {});
  // Fails waiting requests with kShuttingDown, lets running jobs finish, joins the threads.
  ~MissScheduler();
  MissScheduler(const MissScheduler&) = delete;
  MissScheduler& operator=(const MissScheduler&) = delete;

  // Starts or joins a job for each miss. Errors: kBusy (the queue cannot take the new jobs),
  // kDeadlineExceeded (the deadline already passed), kShuttingDown, kBadRequest (a job
  // without a compute function).
  Result<std::unique_ptr<MissRequest>> Submit(std::vector<PrefillJob> misses,
                                              Clock::time_point deadline) EXCLUDES(mu_);

  SchedulerStats stats() const EXCLUDES(mu_);
  size_t workers() const { return pool_.size(); }
  // The compute threads of one CPU worker; 0 without CPU workers (see WorkerPool).
  int cpu_budget() const { return pool_.cpu_budget(); }

 private:
  friend class MissRequest;
  struct Flight;
  using State = MissRequest::State;

  void WorkerLoop(size_t w) EXCLUDES(mu_);
  // Ends `request` with `status` (OK only when all entries arrived) and leaves its jobs.
  void Complete(State& request, Status status) REQUIRES(mu_);
  // Fails the waiters of `flight` whose deadline passed.
  void ExpireWaiters(Flight& flight, Clock::time_point now) REQUIRES(mu_);
  void Deliver(Flight& flight, const EntryPtr& entry) REQUIRES(mu_);
  void EraseFlight(const std::shared_ptr<Flight>& flight) REQUIRES(mu_);
  // Waits until `ready` holds or the request is done; fails it at its deadline.
  template <typename Ready>
  void WaitUntil(State& request, Ready ready) REQUIRES(mu_);
  Result<std::vector<EntryPtr>> Wait(State& request) EXCLUDES(mu_);
  Result<size_t> WaitFor(State& request, size_t count, bool idle_worker) EXCLUDES(mu_);
  // Marks worker `w` idle or busy; waking the requests that wait for an idle worker.
  void SetIdle(size_t w, bool idle) REQUIRES(mu_);
  // Queues `flight` (which worker `failed` could not compute) first in line on the worker where
  // it would finish first, other than those it already failed on; false when there is none.
  bool Requeue(const std::shared_ptr<Flight>& flight, size_t failed) REQUIRES(mu_);
  // Seconds of `job` on worker `w`: the job's own cost, else the CostModel of w's kind, as the
  // worker itself estimates it (+infinity for a worker out of the pool).
  double CostOn(const PrefillJob& job, size_t w) const;
  void Cancel(State& request) EXCLUDES(mu_);

  WorkerPool& pool_;
  Transport& transport_;
  CostModels& cost_models_;
  StoreCallback store_;
  const SchedulerOptions options_;

  mutable Mutex mu_;
  std::unordered_map<SegmentKey, std::shared_ptr<Flight>, SegmentKeyHasher> flights_
      GUARDED_BY(mu_);
  std::vector<std::deque<std::shared_ptr<Flight>>> queues_ GUARDED_BY(mu_);
  std::vector<double> loads_ GUARDED_BY(mu_);         // estimated seconds queued or running
  std::vector<bool> idle_ GUARDED_BY(mu_);            // nothing queued and nothing running
  size_t idle_count_ GUARDED_BY(mu_) = 0;             // of the local workers only
  std::vector<State*> idle_waiters_ GUARDED_BY(mu_);  // in WaitFor(.., idle_worker = true)
  std::vector<std::unique_ptr<std::condition_variable_any>> work_cv_;
  size_t queued_ GUARDED_BY(mu_) = 0;
  size_t rotate_ GUARDED_BY(mu_) = 0;  // start worker of the baselines' next request
  bool stopping_ GUARDED_BY(mu_) = false;
  SchedulerStats stats_ GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace hypic::runtime

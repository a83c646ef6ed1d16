#include "gpu/runtime/miss_scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/logging.h"

namespace hypic::runtime {

namespace {
double SecondsSince(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace

// One key being computed. Guarded by MissScheduler::mu_.
struct MissScheduler::Flight {
  enum class Phase : uint8_t { kQueued, kRunning };
  PrefillJob job;
  double cost = 0.0;  // on `worker`
  size_t worker = 0;
  std::vector<size_t> failed_on;  // remote workers (or lost devices) that failed it
  Phase phase = Phase::kQueued;
  double transfer_s = 0.0;
  double cpu_s = 0.0;  // the worker thread's CPU time for the job
  // (request, slot in that request). A request may wait for one key in several slots.
  std::vector<std::pair<State*, size_t>> waiters;
};

// Guarded by MissScheduler::mu_ (all access goes through the scheduler).
struct MissRequest::State {
  Clock::time_point submitted;
  Clock::time_point deadline;
  std::vector<EntryPtr> entries;
  std::vector<bool> arrived;  // per slot
  size_t prefix = 0;          // the leading slots that all arrived
  std::vector<std::shared_ptr<MissScheduler::Flight>> flights;  // one per distinct key
  size_t remaining = 0;
  bool done = false;
  Status status;
  MissTimings timings;
  std::condition_variable_any cv;
};

MissRequest::MissRequest(MissScheduler* scheduler, std::unique_ptr<State> state)
    : scheduler_(scheduler), state_(std::move(state)) {}

MissRequest::~MissRequest() { scheduler_->Cancel(*state_); }

Result<std::vector<EntryPtr>> MissRequest::Wait() { return scheduler_->Wait(*state_); }

Result<size_t> MissRequest::WaitFor(size_t count, bool idle_worker) {
  return scheduler_->WaitFor(*state_, count, idle_worker);
}

EntryPtr MissRequest::entry(size_t slot) const {
  MutexLock lock(&scheduler_->mu_);
  return state_->entries[slot];
}

void MissRequest::Cancel() { scheduler_->Cancel(*state_); }

MissTimings MissRequest::timings() const {
  MutexLock lock(&scheduler_->mu_);
  return state_->timings;
}

MissScheduler::MissScheduler(WorkerPool& pool, Transport& transport, CostModels& cost_models,
                             StoreCallback store, SchedulerOptions options)
    : pool_(pool),
      transport_(transport),
      cost_models_(cost_models),
      store_(std::move(store)),
      options_(options) {
  {
    MutexLock lock(&mu_);
    queues_.resize(pool_.size());
    loads_.assign(pool_.size(), 0.0);
    idle_.assign(pool_.size(), true);
    for (size_t w = 0; w < pool_.size(); ++w) idle_count_ += pool_.worker(w).remote() ? 0 : 1;
  }
  for (size_t w = 0; w < pool_.size(); ++w) {
    work_cv_.push_back(std::make_unique<std::condition_variable_any>());
  }
  for (size_t w = 0; w < pool_.size(); ++w) {
    threads_.emplace_back([this, w] { WorkerLoop(w); });
  }
}

MissScheduler::~MissScheduler() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& queue : queues_) {
      const auto pending = queue;  // Complete() may drop flights from the queue itself
      for (const auto& flight : pending) {
        // Complete() edits the waiter list; work on a copy.
        auto waiters = flight->waiters;
        for (auto& [request, slot] : waiters) {
          if (!request->done) Complete(*request, ShuttingDown("miss scheduler stopped"));
        }
        EraseFlight(flight);
      }
      queue.clear();
    }
    queued_ = 0;
  }
  for (auto& cv : work_cv_) cv->notify_all();
  for (auto& t : threads_) t.join();
}

Result<std::unique_ptr<MissRequest>> MissScheduler::Submit(std::vector<PrefillJob> misses,
                                                           Clock::time_point deadline) {
  for (const PrefillJob& job : misses) {
    if (!job.compute) return BadRequest("prefill job without a compute function");
  }
  // Estimates outside the lock: the cost models and the remote workers have their own.
  CostMatrix matrix(misses.size(), pool_.size());
  for (size_t i = 0; i < misses.size(); ++i) {
    for (size_t w = 0; w < pool_.size(); ++w) matrix(i, w) = CostOn(misses[i], w);
  }
  std::vector<SegmentKey> keys;
  for (const PrefillJob& job : misses) keys.push_back(job.key);
  auto state = std::make_unique<State>();
  state->submitted = Clock::now();
  state->deadline = deadline;
  state->entries.resize(misses.size());
  state->arrived.assign(misses.size(), false);
  state->timings.worker_cpu_s.assign(pool_.size(), 0.0);
  state->remaining = misses.size();

  MutexLock lock(&mu_);
  if (stopping_) return ShuttingDown("miss scheduler stopped");
  if (state->submitted >= deadline) return DeadlineExceeded("deadline passed before submit");

  // Which misses start a job, and which join one (already in flight, or earlier in this list).
  std::unordered_map<SegmentKey, size_t, SegmentKeyHasher> first_of_key;
  std::vector<size_t> starts;
  for (size_t i = 0; i < misses.size(); ++i) {
    if (flights_.count(keys[i]) == 0 && first_of_key.emplace(keys[i], i).second) {
      starts.push_back(i);
    }
  }
  if (queued_ + starts.size() > options_.max_queued_jobs) {
    ++stats_.busy_rejections;
    return Busy(fmt::format("miss queue full: {} queued, {} new, capacity {}", queued_,
                            starts.size(), options_.max_queued_jobs));
  }

  CostMatrix start_costs(starts.size(), pool_.size());
  for (size_t j = 0; j < starts.size(); ++j) {
    for (size_t w = 0; w < pool_.size(); ++w) start_costs(j, w) = matrix(starts[j], w);
  }
  Assignment assignment = Assign(start_costs, loads_, options_.policy, rotate_);
  rotate_ += starts.size();
  for (size_t w = 0; w < assignment.order.size(); ++w) {
    for (size_t j : assignment.order[w]) {
      size_t i = starts[j];
      auto flight = std::make_shared<Flight>();
      // A job no worker can take costs nothing here: its worker refuses it at once.
      flight->cost = std::isfinite(start_costs(j, w)) ? start_costs(j, w) : 0.0;
      flight->worker = w;
      flight->job = std::move(misses[i]);
      flights_.emplace(flight->job.key, flight);
      queues_[w].push_back(flight);
      SetIdle(w, false);
      loads_[w] += flight->cost;
      ++queued_;
    }
  }
  state->timings.started = starts.size();

  // Attach every slot to its flight.
  for (size_t i = 0; i < state->entries.size(); ++i) {
    // The job itself may have moved into its flight; its key is a plain value and stays.
    std::shared_ptr<Flight>& flight = flights_.at(keys[i]);
    if (std::find(state->flights.begin(), state->flights.end(), flight) == state->flights.end()) {
      state->flights.push_back(flight);
    }
    flight->waiters.emplace_back(state.get(), i);
  }
  state->timings.joined = misses.size() - starts.size();
  stats_.jobs_joined += state->timings.joined;
  if (state->remaining == 0) Complete(*state, Status::Ok());
  for (size_t w = 0; w < assignment.order.size(); ++w) {
    if (!assignment.order[w].empty()) work_cv_[w]->notify_one();
  }
  return std::unique_ptr<MissRequest>(new MissRequest(this, std::move(state)));
}

void MissScheduler::EraseFlight(const std::shared_ptr<Flight>& flight) {
  // By identity: once a flight left the map, a later request may have started a new one for
  // the same key, which must stay.
  auto it = flights_.find(flight->job.key);
  if (it != flights_.end() && it->second == flight) flights_.erase(it);
}

void MissScheduler::Complete(State& request, Status status) {
  if (request.done) return;
  request.done = true;
  request.status = std::move(status);
  for (auto& flight : request.flights) {
    auto& w = flight->waiters;
    w.erase(std::remove_if(w.begin(), w.end(), [&](const auto& p) { return p.first == &request; }),
            w.end());
    if (w.empty() && flight->phase == Flight::Phase::kQueued) {
      // Nobody wants it any more: drop it and free its queue slot.
      auto& queue = queues_[flight->worker];
      auto it = std::find(queue.begin(), queue.end(), flight);
      if (it != queue.end()) {
        queue.erase(it);
        --queued_;
        loads_[flight->worker] -= flight->cost;
        EraseFlight(flight);
        ++stats_.jobs_dropped;
      }
    }
  }
  request.flights.clear();
  request.cv.notify_all();
}

void MissScheduler::ExpireWaiters(Flight& flight, Clock::time_point now) {
  std::vector<State*> expired;
  for (auto& [request, slot] : flight.waiters) {
    if (request->deadline <= now) expired.push_back(request);
  }
  for (State* request : expired) {
    Complete(*request, DeadlineExceeded("deadline passed while the segment was queued"));
  }
}

void MissScheduler::Deliver(Flight& flight, const EntryPtr& entry) {
  const Clock::time_point now = Clock::now();
  auto waiters = std::move(flight.waiters);
  flight.waiters.clear();
  for (auto& [request, slot] : waiters) {
    request->entries[slot] = entry;
    request->arrived[slot] = true;
    while (request->prefix < request->arrived.size() && request->arrived[request->prefix]) {
      ++request->prefix;
    }
    double t = SecondsSince(request->submitted, now);
    if (request->timings.first_arrival_s == 0.0) request->timings.first_arrival_s = t;
    request->timings.last_arrival_s = t;
    request->timings.transfer_s += flight.transfer_s;
    request->timings.worker_cpu_s[flight.worker] += flight.cpu_s;
    if (--request->remaining == 0) {
      Complete(*request, Status::Ok());
    } else {
      request->cv.notify_all();  // a combine may fold what arrived
    }
  }
}

void MissScheduler::SetIdle(size_t w, bool idle) {
  if (idle_[w] == idle) return;
  idle_[w] = idle;
  if (pool_.worker(w).remote()) return;  // not a free local core
  if (!idle) {
    --idle_count_;
    return;
  }
  ++idle_count_;
  for (State* request : idle_waiters_) request->cv.notify_all();
}

double MissScheduler::CostOn(const PrefillJob& job, size_t w) const {
  const Worker& worker = pool_.worker(w);
  if (!worker.healthy()) return std::numeric_limits<double>::infinity();
  const gpu::BackendKind kind = worker.remote() ? gpu::BackendKind::kCpu : worker.context().kind;
  const double local = job.cost > 0.0 ? job.cost : cost_models_.For(kind).Estimate(job.n_tokens);
  return worker.Estimate(job, local);
}

bool MissScheduler::Requeue(const std::shared_ptr<Flight>& flight, size_t failed) {
  flight->failed_on.push_back(failed);
  size_t best = pool_.size();
  double best_finish = std::numeric_limits<double>::infinity(), best_cost = 0.0;
  for (size_t v = 0; v < pool_.size(); ++v) {
    if (std::find(flight->failed_on.begin(), flight->failed_on.end(), v) !=
        flight->failed_on.end()) {
      continue;
    }
    const double cost = CostOn(flight->job, v);
    if (std::isfinite(cost) && loads_[v] + cost < best_finish) {
      best = v, best_finish = loads_[v] + cost, best_cost = cost;
    }
  }
  if (best == pool_.size()) return false;
  flight->worker = best;
  flight->cost = best_cost;
  flight->phase = Flight::Phase::kQueued;
  queues_[best].push_front(flight);
  loads_[best] += best_cost;
  ++queued_;
  SetIdle(best, false);
  ++stats_.failovers;
  work_cv_[best]->notify_one();
  return true;
}

void MissScheduler::WorkerLoop(size_t w) {
  Worker& worker = pool_.worker(w);
  std::condition_variable_any& cv = *work_cv_[w];
  for (;;) {
    std::shared_ptr<Flight> flight;
    Clock::time_point deadline = Clock::time_point::min();  // the latest of its waiters'
    {
      MutexLock lock(&mu_);
      if (queues_[w].empty()) SetIdle(w, true);
      while (!stopping_ && queues_[w].empty()) cv.wait(mu_);
      if (stopping_) return;
      flight = queues_[w].front();
      queues_[w].pop_front();
      --queued_;
      ExpireWaiters(*flight, Clock::now());
      if (flight->waiters.empty()) {
        loads_[w] -= flight->cost;
        EraseFlight(flight);
        ++stats_.jobs_dropped;
        continue;
      }
      if (!worker.healthy()) {
        // Queued here before the device was lost: it runs elsewhere, or fails if nothing is
        // left.
        loads_[w] -= flight->cost;
        if (Requeue(flight, w)) continue;
        ++stats_.prefills_failed;
        Status failed =
            ComputeFailed(fmt::format("prefill of segment {}: no worker left ({} lost its device)",
                                      flight->job.key.ToHex(), worker.name()));
        auto waiters = flight->waiters;
        for (auto& [request, request_slot] : waiters) Complete(*request, failed);
        EraseFlight(flight);
        continue;
      }
      flight->phase = Flight::Phase::kRunning;
      for (const auto& [request, slot] : flight->waiters) {
        deadline = std::max(deadline, request->deadline);
      }
    }

    const Clock::time_point t0 = Clock::now();
    const double cpu0 = ThreadCpuSeconds();
    Result<EntryPtr> computed = worker.Execute(flight->job, deadline);
    flight->cpu_s = ThreadCpuSeconds() - cpu0;
    const Clock::time_point t1 = Clock::now();
    Result<EntryPtr> delivered = computed.status();
    if (computed.ok()) {
      if (!worker.remote()) {
        cost_models_.For(worker.context().kind).Observe(flight->job.n_tokens, SecondsSince(t0, t1));
      }
      // Store first (a few ms against a prefill's hundreds): when a request's Wait returns,
      // every entry it computed has been offered to the store. The flight is still in the map,
      // so a request that misses the key meanwhile joins it instead of computing it again.
      if (store_) store_(*computed);
      const Clock::time_point t2 = Clock::now();
      delivered = transport_.Deliver(*computed, static_cast<int>(w));
      flight->transfer_s = SecondsSince(t2, Clock::now());
    }

    {
      MutexLock lock(&mu_);
      loads_[w] -= flight->cost;
      const bool lost = !computed.ok() && !worker.remote() && !worker.healthy();
      if (lost) {
        ++stats_.device_failures;
        HYPIC_LOG_ERROR("{} is out of the pool: its device was lost ({})", worker.name(),
                        computed.status().ToString());
      }
      if (!computed.ok() && (worker.remote() || lost) && !flight->waiters.empty()) {
        if (Requeue(flight, w)) {
          HYPIC_LOG_WARN("segment {} failed on {} ({}); re-running it on {}",
                         flight->job.key.ToHex(), worker.name(), computed.status().ToString(),
                         pool_.worker(flight->worker).name());
          continue;
        }
      }
      if (!computed.ok()) {
        ++stats_.prefills_failed;
        // A pass refused for its working memory (model/pass_memory.h) keeps its code: the
        // client learns the segment is too large, or to retry.
        const StatusCode code = computed.status().code();
        const std::string what =
            fmt::format("prefill of segment {} on {}: {}", flight->job.key.ToHex(), worker.name(),
                        computed.status().ToString());
        Status failed = code == StatusCode::kTooLarge || code == StatusCode::kBusy
                            ? Status(code, what)
                            : ComputeFailed(what);
        auto waiters = flight->waiters;
        for (auto& [request, slot] : waiters) Complete(*request, failed);
        EraseFlight(flight);
        continue;
      }
      ++stats_.prefills_ok;
      if (!delivered.ok()) {
        Status failed = delivered.status().WithContext(
            fmt::format("transfer of segment {} from {}", flight->job.key.ToHex(), worker.name()));
        auto waiters = flight->waiters;
        for (auto& [request, slot] : waiters) Complete(*request, failed);
      } else {
        Deliver(*flight, *delivered);
      }
      // From now on a request that misses the key finds it in the store (or computes it again
      // if the store did not keep it).
      EraseFlight(flight);
    }
  }
}

template <typename Ready>
void MissScheduler::WaitUntil(State& request, Ready ready) {
  while (!request.done && !ready()) {
    if (request.cv.wait_until(mu_, request.deadline) == std::cv_status::timeout && !request.done &&
        !ready()) {
      Complete(request, DeadlineExceeded("deadline passed while waiting for segment prefills"));
    }
  }
}

Result<std::vector<EntryPtr>> MissScheduler::Wait(State& request) {
  MutexLock lock(&mu_);
  WaitUntil(request, [] { return false; });
  if (!request.status.ok()) return request.status;
  return request.entries;
}

Result<size_t> MissScheduler::WaitFor(State& request, size_t count, bool idle_worker) {
  MutexLock lock(&mu_);
  const size_t n = request.entries.size();
  count = std::min(count, n);
  if (idle_worker) idle_waiters_.push_back(&request);
  WaitUntil(request, [&]() REQUIRES(mu_) {
    return request.prefix >= count && (!idle_worker || idle_count_ > 0 || request.prefix == n);
  });
  if (idle_worker) {
    idle_waiters_.erase(std::find(idle_waiters_.begin(), idle_waiters_.end(), &request));
  }
  if (request.done && !request.status.ok()) return request.status;
  return request.prefix;
}

void MissScheduler::Cancel(State& request) {
  MutexLock lock(&mu_);
  Complete(request, Cancelled("request cancelled"));
}

SchedulerStats MissScheduler::stats() const {
  MutexLock lock(&mu_);
  SchedulerStats s = stats_;
  s.queued = queued_;
  for (size_t w = 0; w < pool_.size(); ++w)
    s.unhealthy_workers += pool_.worker(w).healthy() ? 0 : 1;
  return s;
}

}  // namespace hypic::runtime

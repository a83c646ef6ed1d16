// MissScheduler: single-flight, LPT placement, the bounded queue, cancellation, deadlines,
// error propagation and streamed delivery, on synthetic jobs whose entries encode their key;
// and with remote workers (a double of a peer daemon's connection): per-worker costs, failover
// of the jobs a remote worker fails, deadlines against a slow one, single-flight across both.
#include "gpu/runtime/miss_scheduler.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <time.h>

#include <atomic>
#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "tests/support/check_ok.h"

namespace hypic::runtime {
namespace {

using namespace std::chrono_literals;

SegmentKey Key(uint64_t i) { return SegmentKey(Hash128{i, ~i}); }

// A released-once barrier that blocking jobs wait on.
class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Counts prefills per key, records the worker of each, and optionally blocks on a gate.
struct Recorder {
  std::mutex mu;
  std::map<uint64_t, int> runs;
  std::map<uint64_t, int> worker;
  std::atomic<int> started{0};

  PrefillJob Job(uint64_t id, uint32_t tokens, Gate* gate = nullptr, Status fail = Status::Ok(),
                 std::chrono::milliseconds sleep = 0ms) {
    PrefillJob job;
    job.key = Key(id);
    job.n_tokens = tokens;
    job.cost = tokens;
    job.compute = [this, id, gate, fail, sleep](const WorkerContext& ctx) -> Result<EntryPtr> {
      ++started;
      {
        std::lock_guard<std::mutex> lock(mu);
        ++runs[id];
        worker[id] = ctx.index;
      }
      if (gate != nullptr) gate->Wait();
      if (sleep.count() > 0) std::this_thread::sleep_for(sleep);
      if (!fail.ok()) return fail;
      EntryMeta meta;
      meta.key = Key(id);
      auto entry = std::make_shared<SegmentEntry>(meta);
      auto view = entry->AddTensor(0, TensorKind::kState, DType::kF32, Shape{4});
      if (!view.ok()) return view.status();
      for (int i = 0; i < 4; ++i) view->data_as<float>()[i] = static_cast<float>(id * 10 + i);
      return EntryPtr(entry);
    };
    return job;
  }
  int Runs(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    return runs.count(id) ? runs[id] : 0;
  }
};

bool HoldsKey(const EntryPtr& e, uint64_t id) {
  if (e == nullptr || e->key() != Key(id)) return false;
  const EntryTensor* t = e->Find(0, TensorKind::kState);
  return t != nullptr && t->view.data_as<float>()[3] == static_cast<float>(id * 10 + 3);
}

void WaitUntil(const std::function<bool()>& cond) {
  for (int i = 0; i < 5000 && !cond(); ++i) std::this_thread::sleep_for(1ms);
  REQUIRE(cond());
}

// A remote worker double: "computes" by running the job's function, as a peer daemon would,
// `speedup` times faster than a local worker by its estimate; fails every job while `fail` is
// set, and then takes no more (as a peer marked down), or answers after `delay`.
class FakeRemote final : public Worker {
 public:
  struct Control {
    std::atomic<bool> fail{false};
    std::atomic<bool> mark_down{true};  // a failure marks the worker down
    std::atomic<bool> down{false};
    std::atomic<int> calls{0};
    std::chrono::milliseconds delay{0};
    double speedup = 4.0;
  };
  FakeRemote(std::shared_ptr<Control> control, int index)
      : control_(std::move(control)), name_(fmt::format("fake-peer:{}", index)) {
    context_.index = index;
    context_.backend = &gpu::CpuBackend();
  }
  const WorkerContext& context() const override { return context_; }
  const std::string& name() const override { return name_; }
  bool remote() const override { return true; }
  double Estimate(const PrefillJob& /*job*/, double local_seconds) const override {
    return control_->down ? std::numeric_limits<double>::infinity()
                          : local_seconds / control_->speedup;
  }
  Result<EntryPtr> Execute(const PrefillJob& job, Clock::time_point /*deadline*/) override {
    ++control_->calls;
    std::this_thread::sleep_for(control_->delay);
    if (control_->fail) {
      if (control_->mark_down) control_->down = true;
      return IoError("connection reset by peer");
    }
    return job.compute(context_);
  }

 private:
  std::shared_ptr<Control> control_;
  std::string name_;
  WorkerContext context_;
};

struct Fixture {
  explicit Fixture(int workers, SchedulerOptions options = {},
                   std::vector<std::unique_ptr<Worker>> remote = {})
      : pool(Pool(workers, std::move(remote))),
        cost(CostCoefficients{0.0, 1.0, 0.0}),
        scheduler(
            *pool, transport, cost,
            [this](const EntryPtr& e) {
              std::lock_guard<std::mutex> lock(mu);
              stored.push_back(e);
            },
            options) {}
  static std::unique_ptr<WorkerPool> Pool(int workers,
                                          std::vector<std::unique_ptr<Worker>> remote) {
    if (workers == 0) return std::make_unique<WorkerPool>(std::move(remote));  // remote only
    auto pool = WorkerPool::Create(
        PoolOptions{.kind = gpu::BackendKind::kCpu, .cpu_workers = workers, .cpu_threads = workers},
        std::move(remote));
    REQUIRE_OK(pool);
    return std::move(pool).value();
  }
  size_t Stored() {
    std::lock_guard<std::mutex> lock(mu);
    return stored.size();
  }
  bool StoredKey(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& e : stored) {
      if (e->key() == Key(id)) return true;
    }
    return false;
  }

  std::unique_ptr<WorkerPool> pool;
  HostTransport transport;
  CostModels cost;
  std::mutex mu;
  std::vector<EntryPtr> stored;
  Recorder rec;
  MissScheduler scheduler;
};

Clock::time_point Far() { return Clock::now() + 60s; }

TEST_CASE("every miss is computed, stored once and delivered as a copy in submit order") {
  Fixture f(2);
  std::vector<PrefillJob> jobs;
  for (uint64_t i = 0; i < 8; ++i) jobs.push_back(f.rec.Job(i, 100 + 10 * i));
  auto req = f.scheduler.Submit(std::move(jobs), Far());
  REQUIRE_OK(req);
  auto entries = (*req)->Wait();
  REQUIRE_OK(entries);
  REQUIRE(entries->size() == 8);
  for (uint64_t i = 0; i < 8; ++i) CHECK(HoldsKey((*entries)[i], i));
  CHECK(f.Stored() == 8);  // stored before the combine got them
  // The combine's copy is not the store's entry.
  for (auto& e : f.stored) {
    for (auto& d : *entries)
      CHECK(e->Find(0, TensorKind::kState)->view.data() !=
            d->Find(0, TensorKind::kState)->view.data());
  }
  MissTimings t = (*req)->timings();
  CHECK(t.started == 8);
  CHECK(t.joined == 0);
  CHECK(t.first_arrival_s <= t.last_arrival_s);
  CHECK(f.scheduler.stats().prefills_ok == 8);
  CHECK(f.cost.For(gpu::BackendKind::kCpu).observations() ==
        8);  // measured times calibrate the cost model
}

TEST_CASE("WaitFor follows the arrived prefix of the slots and can wait for an idle worker") {
  Fixture f(2);
  // Equal costs: slots 0 and 2 on worker 0 (in that order), slot 1 on worker 1.
  Gate g0, g1, g2;
  auto req = f.scheduler.Submit(
      {f.rec.Job(0, 10, &g0), f.rec.Job(1, 10, &g1), f.rec.Job(2, 10, &g2)}, Far());
  REQUIRE_OK(req);
  MissRequest& r = **req;
  CHECK(r.WaitFor(0).value() == 0);
  g0.Open();
  auto one = r.WaitFor(1);
  REQUIRE_OK(one);
  CHECK(*one == 1);
  CHECK(HoldsKey(r.entry(0), 0));
  // Worker 0 went on to slot 2 and worker 1 still holds slot 1: nobody is idle, so a wait for
  // an idle worker blocks although the prefix is there.
  WaitUntil([&] { return f.rec.started == 3; });
  std::atomic<bool> returned{false};
  size_t idle_prefix = 0;
  std::thread waiter([&] {
    auto got = r.WaitFor(1, /*idle_worker=*/true);
    if (got.ok()) idle_prefix = *got;
    returned = true;
  });
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(returned);
  g1.Open();  // worker 1 delivers slot 1 and then has nothing to do
  waiter.join();
  CHECK(idle_prefix == 2);
  g2.Open();
  CHECK(r.WaitFor(3).value() == 3);
  CHECK(r.WaitFor(7).value() == 3);  // clamped to the slots
  for (uint64_t i = 0; i < 3; ++i) CHECK(HoldsKey(r.entry(i), i));
}

TEST_CASE("WaitFor returns the request's error") {
  Fixture f(1);
  auto req =
      f.scheduler.Submit({f.rec.Job(1, 10), f.rec.Job(2, 10, nullptr, Internal("boom"))}, Far());
  REQUIRE_OK(req);
  CHECK((*req)->WaitFor(2).status().code() == StatusCode::kComputeFailed);
}

TEST_CASE("single-flight: concurrent requests sharing a missing key cause one prefill") {
  Fixture f(2);
  Gate gate;
  constexpr int kRequests = 8;
  std::vector<std::unique_ptr<MissRequest>> requests(kRequests);
  std::vector<std::thread> threads;
  std::atomic<int> submitted{0};
  for (int r = 0; r < kRequests; ++r) {
    threads.emplace_back([&, r] {
      // Every request misses key 42, plus one key of its own.
      std::vector<PrefillJob> jobs{f.rec.Job(42, 500, &gate), f.rec.Job(100 + r, 10)};
      auto req = f.scheduler.Submit(std::move(jobs), Far());
      CHECK_OK(req);  // no REQUIRE off the main thread: it would throw out of the thread
      if (!req.ok()) return;
      requests[r] = std::move(req).value();
      ++submitted;
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(submitted == kRequests);
  gate.Open();
  for (auto& req : requests) {
    auto entries = req->Wait();
    REQUIRE_OK(entries);
    CHECK(HoldsKey((*entries)[0], 42));
  }
  CHECK(f.rec.Runs(42) == 1);
  for (int r = 0; r < kRequests; ++r) CHECK(f.rec.Runs(100 + r) == 1);
  CHECK(f.scheduler.stats().jobs_joined == kRequests - 1);
  CHECK(f.Stored() == kRequests + 1);
}

TEST_CASE("a key repeated within one request is computed once and fills every slot") {
  Fixture f(1);
  auto req = f.scheduler.Submit({f.rec.Job(5, 10), f.rec.Job(6, 10), f.rec.Job(5, 10)}, Far());
  REQUIRE_OK(req);
  auto entries = (*req)->Wait();
  REQUIRE_OK(entries);
  CHECK(HoldsKey((*entries)[0], 5));
  CHECK(HoldsKey((*entries)[2], 5));
  CHECK(f.rec.Runs(5) == 1);
}

TEST_CASE("jobs land on the workers LPT chooses") {
  Fixture f(2);
  std::vector<double> costs{100, 800, 300, 700, 200, 600};
  std::vector<PrefillJob> jobs;
  for (uint64_t i = 0; i < costs.size(); ++i) {
    jobs.push_back(f.rec.Job(i, static_cast<uint32_t>(costs[i])));
  }
  auto req = f.scheduler.Submit(std::move(jobs), Far());
  REQUIRE_OK(req);
  REQUIRE_OK((*req)->Wait());
  Assignment expect = Assign(costs, std::vector<double>{0, 0}, Policy::kLpt);
  for (uint64_t i = 0; i < costs.size(); ++i) CHECK(f.rec.worker[i] == expect.worker[i]);
}

TEST_CASE("the baselines place jobs as documented; unpriced jobs are priced by the cost model") {
  Fixture f(2, SchedulerOptions{Policy::kContiguous, 1024});
  std::vector<PrefillJob> jobs;
  for (uint64_t i = 0; i < 6; ++i) {
    jobs.push_back(f.rec.Job(i, 100));
    jobs.back().cost = 0.0;  // ask the cost model
  }
  auto req = f.scheduler.Submit(std::move(jobs), Far());
  REQUIRE_OK(req);
  REQUIRE_OK((*req)->Wait());
  for (uint64_t i = 0; i < 6; ++i) CHECK(f.rec.worker[i] == (i < 3 ? 0 : 1));
}

TEST_CASE("a full queue answers BUSY at once and changes nothing") {
  Fixture f(1, SchedulerOptions{Policy::kLpt, 2});
  Gate gate;
  auto running = f.scheduler.Submit({f.rec.Job(1, 10, &gate)}, Far());
  REQUIRE_OK(running);
  WaitUntil([&] { return f.rec.started.load() == 1; });  // job 1 runs: the queue is empty
  auto queued = f.scheduler.Submit({f.rec.Job(2, 10), f.rec.Job(3, 10)}, Far());
  REQUIRE_OK(queued);
  CHECK(f.scheduler.stats().queued == 2);
  const Clock::time_point t0 = Clock::now();
  auto busy = f.scheduler.Submit({f.rec.Job(4, 10)}, Far());
  CHECK(busy.status().code() == StatusCode::kBusy);
  CHECK(Clock::now() - t0 < 1s);
  CHECK(f.scheduler.stats().busy_rejections == 1);
  CHECK(f.scheduler.stats().queued == 2);
  // Joining a key already queued needs no slot.
  auto join = f.scheduler.Submit({f.rec.Job(3, 10)}, Far());
  REQUIRE_OK(join);
  gate.Open();
  REQUIRE_OK((*running)->Wait());
  REQUIRE_OK((*queued)->Wait());
  REQUIRE_OK((*join)->Wait());
  CHECK(f.rec.Runs(4) == 0);
  CHECK(f.rec.Runs(3) == 1);
}

TEST_CASE("cancelling frees the queue slots of jobs nobody else wants") {
  Fixture f(1);
  Gate gate;
  auto blocker = f.scheduler.Submit({f.rec.Job(1, 10, &gate)}, Far());
  REQUIRE_OK(blocker);
  WaitUntil([&] { return f.rec.started.load() == 1; });
  auto victim = f.scheduler.Submit({f.rec.Job(2, 10), f.rec.Job(3, 10)}, Far());
  auto sharer = f.scheduler.Submit({f.rec.Job(3, 10)}, Far());
  REQUIRE_OK(victim);
  REQUIRE_OK(sharer);
  CHECK(f.scheduler.stats().queued == 2);
  (*victim)->Cancel();
  CHECK((*victim)->Wait().status().code() == StatusCode::kCancelled);
  // Job 2 was wanted only by the victim: dropped. Job 3 is still wanted by the sharer.
  CHECK(f.scheduler.stats().queued == 1);
  CHECK(f.scheduler.stats().jobs_dropped == 1);
  gate.Open();
  auto entries = (*sharer)->Wait();
  REQUIRE_OK(entries);
  CHECK(HoldsKey((*entries)[0], 3));
  CHECK(f.rec.Runs(2) == 0);
}

TEST_CASE("destroying an unfinished request cancels it") {
  Fixture f(1);
  Gate gate;
  auto blocker = f.scheduler.Submit({f.rec.Job(1, 10, &gate)}, Far());
  REQUIRE_OK(blocker);
  WaitUntil([&] { return f.rec.started.load() == 1; });
  {
    auto dropped = f.scheduler.Submit({f.rec.Job(2, 10)}, Far());
    REQUIRE_OK(dropped);
    CHECK(f.scheduler.stats().queued == 1);
  }
  CHECK(f.scheduler.stats().queued == 0);
  gate.Open();
  REQUIRE_OK((*blocker)->Wait());
  CHECK(f.rec.Runs(2) == 0);
}

TEST_CASE("deadlines: at submit, while waiting, and for queued jobs") {
  Fixture f(1);
  CHECK(f.scheduler.Submit({f.rec.Job(9, 10)}, Clock::now() - 1ms).status().code() ==
        StatusCode::kDeadlineExceeded);
  Gate gate;
  auto blocker = f.scheduler.Submit({f.rec.Job(1, 10, &gate)}, Far());
  REQUIRE_OK(blocker);
  WaitUntil([&] { return f.rec.started.load() == 1; });
  const Clock::time_point t0 = Clock::now();
  auto late = f.scheduler.Submit({f.rec.Job(2, 10)}, t0 + 50ms);
  REQUIRE_OK(late);
  CHECK((*late)->Wait().status().code() == StatusCode::kDeadlineExceeded);
  const auto waited = Clock::now() - t0;
  CHECK(waited >= 50ms);
  CHECK(waited < 5s);
  CHECK(f.scheduler.stats().queued == 0);  // its job was dropped with it

  // A request that never waits: its expired job is skipped when the worker reaches it.
  auto idle = f.scheduler.Submit({f.rec.Job(3, 10)}, Clock::now() + 20ms);
  REQUIRE_OK(idle);
  std::this_thread::sleep_for(40ms);
  gate.Open();
  REQUIRE_OK((*blocker)->Wait());
  WaitUntil([&] { return f.scheduler.stats().queued == 0; });
  CHECK((*idle)->Wait().status().code() == StatusCode::kDeadlineExceeded);
  CHECK(f.rec.Runs(3) == 0);
}

TEST_CASE("a failed prefill fails every waiter with COMPUTE_FAILED and stores nothing") {
  Fixture f(2);
  Gate gate;
  auto a = f.scheduler.Submit({f.rec.Job(7, 10, &gate, IoError("weights vanished"))}, Far());
  auto b = f.scheduler.Submit({f.rec.Job(8, 10), f.rec.Job(7, 10)}, Far());
  REQUIRE_OK(a);
  REQUIRE_OK(b);
  gate.Open();
  for (auto* req : {&*a, &*b}) {
    Status st = (*req)->Wait().status();
    CHECK(st.code() == StatusCode::kComputeFailed);
    CHECK(st.message().find("weights vanished") != std::string::npos);
  }
  CHECK(f.rec.Runs(7) == 1);
  CHECK(f.scheduler.stats().prefills_failed == 1);
  CHECK_FALSE(f.StoredKey(7));
  // The failed key is not remembered: a later request computes it again.
  auto retry = f.scheduler.Submit({f.rec.Job(7, 10)}, Far());
  REQUIRE_OK(retry);
  auto entries = (*retry)->Wait();
  REQUIRE_OK(entries);
  CHECK(HoldsKey((*entries)[0], 7));
  CHECK(f.StoredKey(7));
}

TEST_CASE("entries stream: the first arrives while later ones still compute") {
  Fixture f(1);
  std::vector<PrefillJob> jobs;
  for (uint64_t i = 0; i < 4; ++i) jobs.push_back(f.rec.Job(i, 10, nullptr, Status::Ok(), 30ms));
  auto req = f.scheduler.Submit(std::move(jobs), Far());
  REQUIRE_OK(req);
  REQUIRE_OK((*req)->Wait());
  MissTimings t = (*req)->timings();
  CHECK(t.first_arrival_s >= 0.025);
  CHECK(t.last_arrival_s - t.first_arrival_s >= 0.08);  // three more 30 ms jobs after the first
}

TEST_CASE("each worker's CPU time for the request is reported") {
  Fixture f(2);
  // Burns 30 ms of its own thread's CPU time, however busy the machine is.
  auto burner = [](uint64_t id) {
    PrefillJob job;
    job.key = Key(id);
    job.cost = 1.0;
    job.compute = [id](const WorkerContext&) -> Result<EntryPtr> {
      timespec t0{}, t{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
      volatile double sink = 0.0;
      do {
        for (int i = 0; i < 10000; ++i) sink = sink + i;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
      } while ((t.tv_sec - t0.tv_sec) * 1e9 + (t.tv_nsec - t0.tv_nsec) < 30e6);
      EntryMeta meta;
      meta.key = Key(id);
      return EntryPtr(std::make_shared<SegmentEntry>(meta));
    };
    return job;
  };
  auto req = f.scheduler.Submit({burner(1), burner(2), burner(3), burner(4)}, Far());
  REQUIRE_OK(req);
  REQUIRE_OK((*req)->Wait());
  MissTimings t = (*req)->timings();
  REQUIRE(t.worker_cpu_s.size() == 2);
  // Equal costs: two jobs per worker, 60 ms of CPU each (plus the loop's last round).
  CHECK(t.worker_cpu_s[0] >= 0.06);
  CHECK(t.worker_cpu_s[1] >= 0.06);
  CHECK(t.worker_cpu_s[0] + t.worker_cpu_s[1] < 1.0);
}

TEST_CASE("an empty request completes at once; a job without a function is rejected") {
  Fixture f(1);
  auto empty = f.scheduler.Submit({}, Far());
  REQUIRE_OK(empty);
  auto entries = (*empty)->Wait();
  REQUIRE_OK(entries);
  CHECK(entries->empty());
  PrefillJob bad;
  bad.key = Key(1);
  CHECK(f.scheduler.Submit({bad}, Far()).status().code() == StatusCode::kBadRequest);
}

std::vector<std::unique_ptr<Worker>> Remotes(const std::shared_ptr<FakeRemote::Control>& control,
                                             int first_index, int count = 1) {
  std::vector<std::unique_ptr<Worker>> out;
  for (int i = 0; i < count; ++i)
    out.push_back(std::make_unique<FakeRemote>(control, first_index + i));
  return out;
}

TEST_CASE("local and remote workers get jobs by their own costs (LPT over the cost matrix)") {
  auto control = std::make_shared<FakeRemote::Control>();
  control->speedup = 3.0;
  Fixture f(1, {}, Remotes(control, 1));
  std::vector<double> costs{100, 800, 300, 700, 200, 600, 400, 500};
  std::vector<PrefillJob> jobs;
  for (uint64_t i = 0; i < costs.size(); ++i) {
    jobs.push_back(f.rec.Job(i, static_cast<uint32_t>(costs[i])));
  }
  auto req = f.scheduler.Submit(std::move(jobs), Far());
  REQUIRE_OK(req);
  REQUIRE_OK((*req)->Wait());
  CostMatrix matrix(costs.size(), 2);
  for (size_t i = 0; i < costs.size(); ++i) matrix(i, 0) = costs[i], matrix(i, 1) = costs[i] / 3;
  Assignment expect = Assign(matrix, std::vector<double>{0, 0}, Policy::kLpt);
  int on_remote = 0;
  for (uint64_t i = 0; i < costs.size(); ++i) {
    CHECK(f.rec.worker[i] == expect.worker[i]);
    on_remote += expect.worker[i] == 1 ? 1 : 0;
  }
  CHECK(on_remote > static_cast<int>(costs.size()) / 2);  // the faster worker takes more
  // Remote times do not calibrate the local cost model.
  CHECK(f.cost.For(gpu::BackendKind::kCpu).observations() ==
        costs.size() - static_cast<size_t>(on_remote));
}

TEST_CASE("jobs a remote worker fails are re-run locally; the request succeeds") {
  auto control = std::make_shared<FakeRemote::Control>();
  control->fail = true;
  Fixture f(1, {}, Remotes(control, 1));
  std::vector<PrefillJob> jobs;
  for (uint64_t i = 0; i < 6; ++i) jobs.push_back(f.rec.Job(i, 100));
  auto req = f.scheduler.Submit(std::move(jobs), Far());
  REQUIRE_OK(req);
  auto entries = (*req)->Wait();
  REQUIRE_OK(entries);
  for (uint64_t i = 0; i < 6; ++i) {
    CHECK(HoldsKey((*entries)[i], i));
    CHECK(f.rec.Runs(i) == 1);
    CHECK(f.rec.worker[i] == 0);  // the local worker computed it
  }
  const SchedulerStats s = f.scheduler.stats();
  CHECK(control->calls > 0);
  CHECK(s.failovers == static_cast<uint64_t>(control->calls.load()));
  CHECK(s.prefills_failed == 0);
  CHECK(s.prefills_ok == 6);
  CHECK(f.Stored() == 6);
}

TEST_CASE("a job fails only when no worker is left to run it") {
  auto control = std::make_shared<FakeRemote::Control>();
  control->fail = true;
  Fixture f(0, {}, Remotes(control, 0, 2));  // two remote workers, no local one
  auto req = f.scheduler.Submit({f.rec.Job(1, 100)}, Far());
  REQUIRE_OK(req);
  CHECK((*req)->Wait().status().code() == StatusCode::kComputeFailed);
  // The first failure marked the double down: the second worker estimates +inf, so no retry.
  CHECK(control->calls == 1);
  CHECK(f.scheduler.stats().failovers == 0);
  CHECK(f.scheduler.stats().prefills_failed == 1);
  CHECK(f.Stored() == 0);
}

TEST_CASE("a job is re-run once per worker at most") {
  auto control = std::make_shared<FakeRemote::Control>();
  control->fail = true;
  control->mark_down = false;  // every worker stays eligible by its estimate
  Fixture f(0, {}, Remotes(control, 0, 3));
  auto req = f.scheduler.Submit({f.rec.Job(1, 100)}, Far());
  REQUIRE_OK(req);
  CHECK((*req)->Wait().status().code() == StatusCode::kComputeFailed);
  CHECK(control->calls == 3);  // once on each worker, then nobody was left
  CHECK(f.scheduler.stats().failovers == 2);
  CHECK(f.scheduler.stats().prefills_failed == 1);
}

TEST_CASE("a slow remote worker never holds a request past its deadline") {
  auto control = std::make_shared<FakeRemote::Control>();
  control->delay = 1500ms;
  control->speedup = 100.0;
  Fixture f(1, {}, Remotes(control, 1));
  const Clock::time_point t0 = Clock::now();
  auto req = f.scheduler.Submit({f.rec.Job(1, 100)}, t0 + 200ms);
  REQUIRE_OK(req);
  CHECK((*req)->Wait().status().code() == StatusCode::kDeadlineExceeded);
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(waited < 1.0);
  CHECK(control->calls == 1);
}

TEST_CASE("single-flight holds across local and remote workers") {
  auto control = std::make_shared<FakeRemote::Control>();
  Fixture f(1, {}, Remotes(control, 1));
  Gate gate;
  auto first = f.scheduler.Submit({f.rec.Job(7, 100, &gate)}, Far());
  REQUIRE_OK(first);
  WaitUntil([&] { return f.rec.started == 1; });  // running on the (faster) remote worker
  auto second = f.scheduler.Submit({f.rec.Job(7, 100), f.rec.Job(8, 100)}, Far());
  REQUIRE_OK(second);
  gate.Open();
  auto a = (*first)->Wait();
  auto b = (*second)->Wait();
  REQUIRE_OK(a);
  REQUIRE_OK(b);
  CHECK(HoldsKey((*a)[0], 7));
  CHECK(HoldsKey((*b)[0], 7));
  CHECK(HoldsKey((*b)[1], 8));
  CHECK(f.rec.Runs(7) == 1);
  CHECK(f.rec.worker[7] == 1);
  CHECK((*second)->timings().joined == 1);
}

// A local GPU worker double whose device is lost on its first job: the job fails with a device
// error and the worker reports unhealthy from then on, as LocalWorker does after a sticky CUDA
// error (CheckDevice failing).
class LosingDevice final : public Worker {
 public:
  explicit LosingDevice(int index) : name_(fmt::format("fake-cuda:{}", index)) {
    context_.index = index;
    context_.kind = gpu::BackendKind::kCuda;
    context_.backend = &gpu::CpuBackend();
  }
  const WorkerContext& context() const override { return context_; }
  const std::string& name() const override { return name_; }
  bool healthy() const override { return !lost_; }
  Result<EntryPtr> Execute(const PrefillJob& /*job*/, Clock::time_point /*deadline*/) override {
    ++calls;
    lost_ = true;
    return DeviceError("cudaStreamSynchronize failed: cudaErrorIllegalAddress");
  }
  std::atomic<int> calls{0};

 private:
  std::atomic<bool> lost_{false};
  std::string name_;
  WorkerContext context_;
};

TEST_CASE("a lost device leaves the pool: its jobs, running and queued, run on the others") {
  std::vector<std::unique_ptr<Worker>> extra;
  extra.push_back(std::make_unique<LosingDevice>(1));
  auto* device = static_cast<LosingDevice*>(extra.back().get());
  Fixture f(1, {}, std::move(extra));
  Gate gate;
  std::vector<PrefillJob> jobs;
  // Equal costs: LPT gives the device half of them, queued behind its first.
  for (uint64_t i = 0; i < 6; ++i) jobs.push_back(f.rec.Job(i, 100, i == 0 ? &gate : nullptr));
  auto req = f.scheduler.Submit(std::move(jobs), Far());
  REQUIRE_OK(req);
  WaitUntil([&] { return device->calls.load() == 1; });
  gate.Open();
  auto entries = (*req)->Wait();
  REQUIRE_OK(entries);
  for (uint64_t i = 0; i < 6; ++i) {
    CHECK(HoldsKey((*entries)[i], i));
    CHECK(f.rec.worker[i] == 0);  // the CPU worker computed every one
  }
  SchedulerStats s = f.scheduler.stats();
  CHECK(s.device_failures == 1);
  CHECK(s.unhealthy_workers == 1);
  CHECK(s.prefills_failed == 0);
  CHECK(s.prefills_ok == 6);
  // Later requests never reach the lost device.
  auto later = f.scheduler.Submit({f.rec.Job(10, 100), f.rec.Job(11, 100)}, Far());
  REQUIRE_OK(later);
  REQUIRE_OK((*later)->Wait());
  CHECK(device->calls == 1);
  CHECK(f.rec.worker[10] == 0);
  CHECK(f.rec.worker[11] == 0);
}

TEST_CASE("a job fails when the device it ran on was the only worker") {
  std::vector<std::unique_ptr<Worker>> only;
  only.push_back(std::make_unique<LosingDevice>(0));
  Fixture f(0, {}, std::move(only));
  auto req = f.scheduler.Submit({f.rec.Job(1, 100), f.rec.Job(2, 100)}, Far());
  REQUIRE_OK(req);
  const Status st = (*req)->Wait().status();
  CHECK(st.code() == StatusCode::kComputeFailed);
  CHECK(st.message().find("IllegalAddress") != std::string::npos);
  CHECK(f.scheduler.stats().device_failures == 1);
}

TEST_CASE("each kind of local worker calibrates its own cost model") {
  Fixture f(2);
  std::vector<PrefillJob> jobs;
  for (uint64_t i = 0; i < 4; ++i) {
    jobs.push_back(f.rec.Job(i, 100 + 50 * static_cast<uint32_t>(i)));
    jobs.back().cost = 0.0;  // priced by the cost model of the worker's kind
  }
  auto req = f.scheduler.Submit(std::move(jobs), Far());
  REQUIRE_OK(req);
  REQUIRE_OK((*req)->Wait());
  CHECK(f.cost.For(gpu::BackendKind::kCpu).observations() == 4);
  CHECK(f.cost.For(gpu::BackendKind::kCuda).observations() == 0);
}

}  // namespace
}  // namespace hypic::runtime

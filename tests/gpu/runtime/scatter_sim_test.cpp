// The scatter simulator agrees with the assignment arithmetic and models transfers as
// documented: on-worker copies, a shared combine link, and the synchronous burst; and the
// streamed combine, on cores of its own or shared with the workers; workers of different
// speeds, and peer daemons whose entries cross a shared network link.
#include "gpu/runtime/scatter_sim.h"

#include <doctest/doctest.h>

#include <vector>

namespace hypic::runtime {
namespace {

std::vector<SimSegment> Segments(const std::vector<double>& costs, size_t bytes) {
  std::vector<SimSegment> s;
  for (double c : costs) s.push_back({1024, c, c, bytes});
  return s;
}

TEST_CASE("without transfers the TTFT is the assignment's makespan plus the combine") {
  std::vector<double> costs{5, 1, 4, 2, 3, 3, 7, 1};
  auto segs = Segments(costs, 0);
  for (Policy p : {Policy::kLpt, Policy::kRoundRobin, Policy::kContiguous}) {
    for (int m : {1, 2, 3, 8}) {
      SimOptions o;
      o.workers = m;
      o.policy = p;
      o.combine_s = 0.5;
      SimResult r = SimulateCold(segs, o);
      std::vector<double> loads(static_cast<size_t>(m), 0.0);
      double makespan = Makespan(Assign(costs, loads, p), costs, loads);
      CHECK(r.compute_span_s == doctest::Approx(makespan));
      CHECK(r.ttft_s == doctest::Approx(makespan + 0.5));
    }
  }
}

TEST_CASE("on-worker copies delay the worker; a shared link queues the entries") {
  auto segs = Segments({1, 1, 1, 1}, 1000);
  SimOptions o;
  o.workers = 2;
  o.transfer = TransferModel{0.0, 10000.0, true};  // 0.1 s per entry on the worker
  SimResult on_worker = SimulateCold(segs, o);
  CHECK(on_worker.ttft_s == doctest::Approx(2.2));  // two jobs + two copies per worker
  CHECK(on_worker.worker_busy_s[0] == doctest::Approx(2.2));

  o.transfer.on_worker = false;  // 4 entries share the link: done at 1,1,2,2
  SimResult link = SimulateCold(segs, o);
  CHECK(link.compute_span_s == doctest::Approx(2.0));
  CHECK(link.ttft_s == doctest::Approx(2.2));
  o.transfer.bytes_per_s = 2000.0;  // 0.5 s per entry: the link is the bottleneck
  CHECK(SimulateCold(segs, o).ttft_s == doctest::Approx(1.0 + 4 * 0.5));
}

TEST_CASE("streaming hides transfers that the synchronous burst pays at the end") {
  auto segs = Segments({2, 2, 2, 2, 2, 2}, 1000);
  SimOptions o;
  o.workers = 2;
  o.transfer = TransferModel{0.01, 5000.0, false};  // 0.21 s per entry
  SimResult streamed = SimulateCold(segs, o);
  o.streamed = false;
  SimResult burst = SimulateCold(segs, o);
  CHECK(streamed.ttft_s == doctest::Approx(6.0 + 2 * 0.21));
  CHECK(burst.ttft_s == doctest::Approx(6.0 + 6 * 0.21));
  CHECK(streamed.ttft_s < burst.ttft_s);
}

TEST_CASE("assignment follows the estimates, the clock follows the real costs") {
  // The scheduler believes job 0 is short; it is the longest.
  std::vector<SimSegment> segs{{1024, 9.0, 1.0, 0}, {1024, 3.0, 3.0, 0}, {1024, 3.0, 3.0, 0}};
  SimOptions o;
  o.workers = 2;
  SimResult r = SimulateCold(segs, o);
  // LPT on estimates: jobs 1 and 2 first, one per worker; job 0 after one of them.
  CHECK(r.ttft_s == doctest::Approx(12.0));
}

TEST_CASE("a streamed combine folds while the rest computes; on shared cores it slows them") {
  // Two workers: jobs 0 and 2 on one, 1 and 3 on the other; entries at t = 1 (0, 1) and 2.
  auto segs = Segments({1, 1, 1, 1}, 0);
  SimOptions o;
  o.workers = 2;
  o.combine_s = 0.5;
  CHECK(SimulateCold(segs, o).ttft_s == doctest::Approx(2.5));  // one combine at the end
  o.fold = {{2, 0.3}, {4, 0.2}};
  // Own cores: the first step runs 1.0-1.3 beside the workers, the second 2.0-2.2.
  SimResult own = SimulateCold(segs, o);
  CHECK(own.compute_span_s == doctest::Approx(2.0));
  CHECK(own.ttft_s == doctest::Approx(2.2));
  // Two cores for three threads during the first step: each runs at 2/3 speed, so the step
  // ends at 1.45, the workers at 1.45 + 0.7 = 2.15, and the last step at 2.35.
  o.cores = 2;
  SimResult shared = SimulateCold(segs, o);
  CHECK(shared.compute_span_s == doctest::Approx(2.15));
  CHECK(shared.ttft_s == doctest::Approx(2.35));
  // Folding only while a worker is idle: no worker idles before 2.0, so both steps run then.
  o.fold_when_idle = true;
  SimResult idle = SimulateCold(segs, o);
  CHECK(idle.compute_span_s == doctest::Approx(2.0));
  CHECK(idle.ttft_s == doctest::Approx(2.5));
  // One core: everything in sequence, whatever the policy.
  o.workers = 1;
  o.cores = 1;
  o.fold_when_idle = false;
  CHECK(SimulateCold(segs, o).ttft_s == doctest::Approx(4.5));
}

TEST_CASE("a faster worker takes more of the jobs; the assignment sees the speeds") {
  auto segs = Segments({1, 1, 1, 1, 1, 1}, 0);
  SimOptions o;
  o.workers = 2;
  o.worker_models = {{2.0, false}, {1.0, false}};  // worker 0 twice as fast
  SimResult r = SimulateCold(segs, o);
  CHECK(r.compute_span_s == doctest::Approx(2.0));  // 4 jobs at 0.5 s, 2 jobs at 1 s
  CHECK(r.worker_busy_s[0] == doctest::Approx(2.0));
  CHECK(r.worker_busy_s[1] == doctest::Approx(2.0));
}

TEST_CASE("a peer computes beside the local cores and waits for its entry to cross the link") {
  auto segs = Segments({1, 1, 1, 1}, 1000);
  SimOptions o;
  o.workers = 2;
  o.cores = 1;  // the local worker and the combine share one core; the peer has its own
  o.combine_s = 0.5;
  o.worker_models = {{1.0, false}, {1.0, true}};
  o.network = TransferModel{0.0, 4000.0, false};  // 0.25 s per entry
  SimResult r = SimulateCold(segs, o);
  // The assignment charges the peer 1.25 s a job: two each. The peer's entries arrive at 1.25
  // and 2.5 (its second job starts after the first entry arrived); the local ones at 1 and 2.
  CHECK(r.worker_busy_s[0] == doctest::Approx(2.0));
  CHECK(r.worker_busy_s[1] == doctest::Approx(2.0));
  CHECK(r.last_arrival_s == doctest::Approx(2.5));
  CHECK(r.ttft_s == doctest::Approx(3.0));

  // Peers share the router's ingress link: two peers finishing together queue their entries.
  auto two = Segments({1, 1}, 1000);
  o.worker_models = {{1.0, true}, {1.0, true}};
  SimResult peers = SimulateCold(two, o);
  CHECK(peers.last_arrival_s == doctest::Approx(1.5));  // 1.25, then 1.5
  CHECK(peers.ttft_s == doctest::Approx(2.0));
}

}  // namespace
}  // namespace hypic::runtime

// Assignment of prefill jobs to workers: LPT greedy (the default), round-robin and contiguous
// sharding (the two baselines the paper compares against). Pure functions over estimated
// costs, shared by the MissScheduler, the scatter simulator and the tests, so all three
// assign exactly alike. Thread-safe (no state).
//
// Costs are per (job, worker): workers of different speeds (local cores, peer daemons behind a
// network) each have their own estimate of a job, and +infinity marks a worker that cannot take
// it. With equal columns this is the classic identical-machines LPT.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace hypic::runtime {

enum class Policy : uint8_t {
  kLpt = 0,         // longest estimated cost first onto the least-loaded worker, then a
                    // local search (moves and swaps off the busiest worker)
  kRoundRobin = 1,  // job i onto worker i mod m, in request order
  kContiguous = 2,  // request order cut into m runs of ceil(n/m) jobs ("naive sharding")
};

std::string_view PolicyName(Policy policy);
// Accepts "lpt", "round-robin" (or "rr") and "contiguous".
std::optional<Policy> ParsePolicy(std::string_view name);

struct Assignment {
  // worker[i] is the worker of job i.
  std::vector<int> worker;
  // For each worker, its jobs in the order it should run them: request order for every policy
  // (the combine folds the prompt in that order as entries arrive).
  std::vector<std::vector<size_t>> order;
};

// The estimated seconds of each job on each worker. Value type.
class CostMatrix {
 public:
  CostMatrix(size_t jobs, size_t workers, double fill = 0.0)
      : jobs_(jobs), workers_(workers), c_(jobs * workers, fill) {}
  // Job i costs costs[i] on every one of `workers` workers.
  static CostMatrix Uniform(std::span<const double> costs, size_t workers);

  size_t jobs() const { return jobs_; }
  size_t workers() const { return workers_; }
  double operator()(size_t job, size_t worker) const { return c_[job * workers_ + worker]; }
  double& operator()(size_t job, size_t worker) { return c_[job * workers_ + worker]; }

 private:
  size_t jobs_;
  size_t workers_;
  std::vector<double> c_;
};

// Assigns `costs.jobs()` jobs to `loads.size()` workers (= costs.workers()). `loads` holds the
// work already queued on each worker (seconds); LPT takes it into account, the baselines ignore
// it. LPT orders the jobs by their cheapest cost, longest first, puts each where it would finish
// first (load + its cost there), then searches locally (moves and swaps off the busiest worker).
// The baselines place job i as they would on identical workers but step over a worker with an
// infinite cost. A job that no worker can take goes to the least-loaded worker (which will
// refuse it). REQUIRES: loads is not empty; costs are >= 0 (finite or +infinity).
Assignment Assign(const CostMatrix& costs, std::span<const double> loads, Policy policy,
                  size_t first_worker = 0);

// Assigns `costs.size()` jobs to `loads.size()` workers. `loads` holds the work already queued
// on each worker (same unit as costs); LPT takes it into account, the baselines ignore it.
// `first_worker` rotates the baselines so that consecutive small requests do not all start on
// worker 0. REQUIRES: loads is not empty; costs are finite and >= 0.
Assignment Assign(std::span<const double> costs, std::span<const double> loads, Policy policy,
                  size_t first_worker = 0);

// The makespan of an assignment when job i really takes `costs[i]`: the largest per-worker sum
// plus that worker's initial load.
double Makespan(const Assignment& assignment, std::span<const double> costs,
                std::span<const double> loads);
// The same with per-worker costs.
double Makespan(const Assignment& assignment, const CostMatrix& costs,
                std::span<const double> loads);

}  // namespace hypic::runtime

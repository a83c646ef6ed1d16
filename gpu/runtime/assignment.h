// Assignment of prefill jobs to workers: LPT greedy (the default), round-robin and contiguous
// sharding (the two baselines the paper compares against). Pure functions over estimated
// costs, shared by the MissScheduler, the scatter simulator and the tests, so all three
// assign exactly alike. Thread-safe (no state).
#pragma once

#include <cstddef>
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

}  // namespace hypic::runtime

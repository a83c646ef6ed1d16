#include "gpu/runtime/assignment.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace hypic::runtime {

std::string_view PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kLpt: return "lpt";
    case Policy::kRoundRobin: return "round-robin";
    case Policy::kContiguous: return "contiguous";
  }
  return "?";
}

std::optional<Policy> ParsePolicy(std::string_view name) {
  if (name == "lpt") return Policy::kLpt;
  if (name == "round-robin" || name == "rr") return Policy::kRoundRobin;
  if (name == "contiguous") return Policy::kContiguous;
  return std::nullopt;
}

namespace {

// Local search after the greedy pass: move one job, or swap two, off the most loaded worker
// whenever that lowers its load without raising the other to its old level. Each step lowers
// the busiest load or the number of workers at it, so it ends; the cap bounds the time.
void Refine(const CostMatrix& c, std::vector<double>& load, std::vector<int>& worker) {
  const size_t n = c.jobs();
  const size_t m = load.size();
  for (size_t step = 0; step < 4 * n * m; ++step) {
    const size_t top =
        static_cast<size_t>(std::max_element(load.begin(), load.end()) - load.begin());
    double best_peak = load[top];
    size_t best_job = n, best_other = n, best_to = m;
    for (size_t j = 0; j < n; ++j) {
      if (static_cast<size_t>(worker[j]) != top) continue;
      for (size_t v = 0; v < m; ++v) {
        if (v == top || !std::isfinite(c(j, v))) continue;
        // Move j to v.
        double peak = std::max(load[top] - c(j, top), load[v] + c(j, v));
        if (peak < best_peak - 1e-12) {
          best_peak = peak, best_job = j, best_other = n, best_to = v;
        }
        // Swap j with a job k of v that is shorter than j on top.
        for (size_t k = 0; k < n; ++k) {
          if (static_cast<size_t>(worker[k]) != v || !std::isfinite(c(k, top)) ||
              c(k, top) >= c(j, top)) {
            continue;
          }
          peak = std::max(load[top] - c(j, top) + c(k, top), load[v] - c(k, v) + c(j, v));
          if (peak < best_peak - 1e-12) {
            best_peak = peak, best_job = j, best_other = k, best_to = v;
          }
        }
      }
    }
    if (best_job == n) return;
    load[top] -= c(best_job, top);
    load[best_to] += c(best_job, best_to);
    worker[best_job] = static_cast<int>(best_to);
    if (best_other != n) {
      load[best_to] -= c(best_other, best_to);
      load[top] += c(best_other, top);
      worker[best_other] = static_cast<int>(top);
    }
  }
}

// The first worker from `w` on (cyclically) that can take `job`; `w` itself when none can.
size_t FirstAble(const CostMatrix& c, size_t job, size_t w) {
  for (size_t d = 0; d < c.workers(); ++d) {
    size_t v = (w + d) % c.workers();
    if (std::isfinite(c(job, v))) return v;
  }
  return w;
}

}  // namespace

CostMatrix CostMatrix::Uniform(std::span<const double> costs, size_t workers) {
  CostMatrix c(costs.size(), workers);
  for (size_t i = 0; i < costs.size(); ++i) {
    for (size_t w = 0; w < workers; ++w) c(i, w) = costs[i];
  }
  return c;
}

Assignment Assign(const CostMatrix& costs, std::span<const double> loads, Policy policy,
                  size_t first_worker) {
  const size_t n = costs.jobs();
  const size_t m = loads.size();
  Assignment a;
  a.worker.assign(n, 0);
  a.order.assign(m, {});
  switch (policy) {
    case Policy::kLpt: {
      // Each job's cheapest cost: the order of the greedy pass.
      std::vector<double> cheapest(n, std::numeric_limits<double>::infinity());
      for (size_t i = 0; i < n; ++i) {
        for (size_t w = 0; w < m; ++w) cheapest[i] = std::min(cheapest[i], costs(i, w));
      }
      std::vector<size_t> by_cost(n);
      std::iota(by_cost.begin(), by_cost.end(), size_t{0});
      // Stable: equal costs keep request order, so the assignment is deterministic. Jobs no
      // worker can take sort last.
      std::stable_sort(by_cost.begin(), by_cost.end(), [&](size_t x, size_t y) {
        const bool fx = std::isfinite(cheapest[x]), fy = std::isfinite(cheapest[y]);
        return fx != fy ? fx : fx && cheapest[x] > cheapest[y];
      });
      std::vector<double> load(loads.begin(), loads.end());
      for (size_t job : by_cost) {
        size_t best = 0;
        if (std::isfinite(cheapest[job])) {
          for (size_t w = 1; w < m; ++w) {
            if (load[w] + costs(job, w) < load[best] + costs(job, best)) best = w;
          }
          load[best] += costs(job, best);
        } else {
          best = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        }
        a.worker[job] = static_cast<int>(best);
      }
      Refine(costs, load, a.worker);
      // Each worker runs its jobs in request (prompt) order: a worker's finish time does not
      // depend on its order, and in prompt order the early parts of the prompt arrive first, so
      // the streamed combine can fold them while the later ones compute.
      for (size_t job = 0; job < n; ++job)
        a.order[static_cast<size_t>(a.worker[job])].push_back(job);
      break;
    }
    case Policy::kRoundRobin:
      for (size_t i = 0; i < n; ++i) {
        size_t w = FirstAble(costs, i, (first_worker + i) % m);
        a.worker[i] = static_cast<int>(w);
        a.order[w].push_back(i);
      }
      break;
    case Policy::kContiguous: {
      const size_t per = (n + m - 1) / m;
      for (size_t i = 0; i < n; ++i) {
        size_t w = FirstAble(costs, i, (first_worker + i / per) % m);
        a.worker[i] = static_cast<int>(w);
        a.order[w].push_back(i);
      }
      break;
    }
  }
  return a;
}

Assignment Assign(std::span<const double> costs, std::span<const double> loads, Policy policy,
                  size_t first_worker) {
  return Assign(CostMatrix::Uniform(costs, loads.size()), loads, policy, first_worker);
}

double Makespan(const Assignment& assignment, const CostMatrix& costs,
                std::span<const double> loads) {
  double worst = 0.0;
  for (size_t w = 0; w < assignment.order.size(); ++w) {
    double sum = w < loads.size() ? loads[w] : 0.0;
    for (size_t job : assignment.order[w]) sum += costs(job, w);
    worst = std::max(worst, sum);
  }
  return worst;
}

double Makespan(const Assignment& assignment, std::span<const double> costs,
                std::span<const double> loads) {
  return Makespan(assignment, CostMatrix::Uniform(costs, assignment.order.size()), loads);
}

}  // namespace hypic::runtime

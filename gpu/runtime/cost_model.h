// CostModel: the estimated prefill time of a segment, used to balance misses across workers.
//
//   seconds(n) = c + a * u + b * u^2,   u = n / 1024 tokens
//
// The linear term covers the projections, MLP/MoE and the linear-attention layers; the
// quadratic term covers the full-attention layers; c is the per-call overhead. The prior comes
// from the model shape (FLOPs per token and per token pair over a nominal device throughput);
// measured prefill times then calibrate it online: a least-squares fit with exponential
// forgetting (so the model follows a machine whose load changes), regularised towards the prior
// scaled by the best single factor, so that one observed length already fixes the overall scale
// and more varied lengths fix the shape. Thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "core/thread_annotations.h"
#include "gpu/backend.h"

namespace hypic::runtime {

struct CostCoefficients {
  double c = 0.0;  // seconds per call
  double a = 0.0;  // seconds per 1024 tokens
  double b = 0.0;  // seconds per (1024 tokens)^2
};

// The work of one segment prefill as a function of its length, from the model shape.
struct CostShape {
  double flops_per_token = 0.0;       // projections, MLP, linear-attention layers
  double flops_per_token_pair = 0.0;  // full-attention score + value work per (query, key) pair
};

class CostModel {
 public:
  // `forgetting` in (0, 1]: weight of older observations per new one (1 = never forget).
  explicit CostModel(CostCoefficients prior, double forgetting = 0.98);

  // A prior for a device that sustains `flops_per_second` on this model; causal attention
  // touches n^2/2 pairs. REQUIRES: flops_per_second > 0.
  static CostCoefficients PriorFromShape(const CostShape& shape, double flops_per_second,
                                         double seconds_per_call = 1e-4);

  // Estimated seconds for a segment of `n_tokens` (never negative).
  double Estimate(uint32_t n_tokens) const EXCLUDES(mu_);
  // Records one measured prefill. Ignores non-finite or negative times.
  void Observe(uint32_t n_tokens, double seconds) EXCLUDES(mu_);

  CostCoefficients coefficients() const EXCLUDES(mu_);
  size_t observations() const EXCLUDES(mu_);

 private:
  using Vec3 = std::array<double, 3>;
  static Vec3 Features(uint32_t n_tokens);
  void Refit() REQUIRES(mu_);

  const Vec3 prior_;
  const double forgetting_;
  mutable Mutex mu_;
  // Weighted normal equations: sum w x x^T, sum w x y, and the sums for the prior's scale.
  std::array<Vec3, 3> xtx_ GUARDED_BY(mu_) = {};
  Vec3 xty_ GUARDED_BY(mu_) = {};
  double weight_ GUARDED_BY(mu_) = 0.0;
  double py_ GUARDED_BY(mu_) = 0.0;  // sum w p(x) y
  double pp_ GUARDED_BY(mu_) = 0.0;  // sum w p(x)^2
  Vec3 theta_ GUARDED_BY(mu_);
  size_t count_ GUARDED_BY(mu_) = 0;
};

// One CostModel per kind of local worker: a GPU's measured prefills calibrate only the GPU
// estimate and a CPU worker's only the CPU one, so LPT never hands a CPU worker a GPU's share
// (or the reverse) because one kind's times were read as the other's. Remote workers (peers)
// scale the CPU estimate by their own calibrated speed (Worker::Estimate). Thread-safe.
class CostModels {
 public:
  CostModels(CostCoefficients cpu_prior, CostCoefficients cuda_prior, double forgetting = 0.98)
      : cpu_(cpu_prior, forgetting), cuda_(cuda_prior, forgetting) {}
  // The same prior for both kinds (pools of one kind, tests).
  explicit CostModels(CostCoefficients prior = {}) : CostModels(prior, prior) {}

  CostModel& For(gpu::BackendKind kind) { return kind == gpu::BackendKind::kCuda ? cuda_ : cpu_; }
  const CostModel& For(gpu::BackendKind kind) const {
    return kind == gpu::BackendKind::kCuda ? cuda_ : cpu_;
  }

 private:
  CostModel cpu_, cuda_;
};

}  // namespace hypic::runtime

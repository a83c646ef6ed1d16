// The arithmetic of `hypic-bench quality` (docs/quality.md): log-softmax, KL(p || q) of two
// logit rows, the argmax, and the Wilson score interval of a proportion. Header-only pure
// functions; thread-safe.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace hypic::tools {

// REQUIRES: a non-empty row. The first maximum on ties, as greedy decoding takes it.
inline uint32_t Argmax(std::span<const float> logits) {
  return static_cast<uint32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// log softmax in double precision.
inline std::vector<double> LogSoftmax(std::span<const float> logits) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  const double log_z = mx + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - log_z;
  return out;
}

// KL(softmax(p) || softmax(q)) in nats, clamped at 0 (rounding can make it a hair negative).
// REQUIRES: rows of equal, non-zero length.
inline double KlDivergence(std::span<const float> p_logits, std::span<const float> q_logits) {
  const std::vector<double> lp = LogSoftmax(p_logits), lq = LogSoftmax(q_logits);
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(kl, 0.0);
}

// The 95% Wilson score interval of `successes` out of `n` (n = 0: [0, 1]). Unlike the normal
// approximation it stays inside [0, 1] and does not collapse to a point at 0% or 100%.
struct Interval {
  double low = 0, high = 1;
  double HalfWidth() const { return (high - low) / 2; }
};
inline Interval WilsonInterval(size_t successes, size_t n, double z = 1.959963984540054) {
  if (n == 0) return {};
  const double nn = static_cast<double>(n);
  const double p = static_cast<double>(successes) / nn;
  const double z2 = z * z;
  const double center = (p + z2 / (2 * nn)) / (1 + z2 / nn);
  const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / (1 + z2 / nn);
  return {std::max(0.0, center - half), std::min(1.0, center + half)};
}

}  // namespace hypic::tools

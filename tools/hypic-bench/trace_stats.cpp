#include "tools/hypic-bench/trace_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hypic::tools {

double Percentile(std::span<const double> sorted, double q) {
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  if (frac == 0 || sorted[lo] == sorted[hi]) return sorted[lo];
  if (std::isinf(sorted[hi])) return sorted[hi];  // inf * 0 would be NaN
  return sorted[lo] + frac * (sorted[hi] - sorted[lo]);
}

LatencySummary SummarizeLatencies(std::vector<double> latencies_s) {
  LatencySummary s;
  s.count = latencies_s.size();
  if (latencies_s.empty()) return s;
  std::sort(latencies_s.begin(), latencies_s.end());
  double sum = 0;
  for (double v : latencies_s) {
    if (std::isinf(v)) {
      ++s.failed;
    } else {
      sum += v;
    }
  }
  const size_t completed = s.count - s.failed;
  s.mean = completed > 0 ? sum / static_cast<double>(completed) : 0.0;
  s.p50 = Percentile(latencies_s, 0.50);
  s.p90 = Percentile(latencies_s, 0.90);
  s.p99 = Percentile(latencies_s, 0.99);
  s.max = latencies_s.back();
  return s;
}

std::vector<std::pair<double, double>> LatencyCdf(std::vector<double> latencies_s,
                                                  size_t max_points) {
  std::vector<std::pair<double, double>> cdf;
  if (latencies_s.empty() || max_points == 0) return cdf;
  std::sort(latencies_s.begin(), latencies_s.end());
  const size_t n = latencies_s.size();
  const size_t points = std::min(n, max_points);
  for (size_t i = 0; i < points; ++i) {
    // Ranks spread evenly over [0, n-1], always including the last one.
    const size_t rank = points == 1 ? n - 1 : i * (n - 1) / (points - 1);
    if (std::isinf(latencies_s[rank])) break;
    cdf.emplace_back(latencies_s[rank], static_cast<double>(rank + 1) / static_cast<double>(n));
  }
  return cdf;
}

Result<QpsSearchResult> SearchSustainableQps(double start_qps, double slo_s, int max_probes,
                                             double rel_tolerance,
                                             const std::function<Result<double>(double)>& p99_at,
                                             std::span<const QpsProbe> known) {
  if (!(start_qps > 0) || !(slo_s > 0) || max_probes < 1 || !(rel_tolerance > 0)) {
    return BadRequest("qps search: start_qps, slo and tolerance must be > 0, max_probes >= 1");
  }
  QpsSearchResult result;
  double pass = 0;  // highest rate known to meet the SLO (0: none yet)
  double fail = std::numeric_limits<double>::infinity();  // lowest rate known to miss it
  auto record = [&](double qps, double p99) {
    const bool ok = p99 <= slo_s;
    result.probes.push_back({qps, p99, ok});
    if (ok) {
      result.sustainable_qps = std::max(result.sustainable_qps, qps);
      pass = std::max(pass, qps);
    } else {
      fail = std::min(fail, qps);
    }
    return ok;
  };
  for (const QpsProbe& k : known) record(k.qps, k.p99_s);
  int run = 0;
  auto probe = [&](double qps) -> Result<bool> {
    HYPIC_ASSIGN_OR_RETURN(double p99, p99_at(qps));
    ++run;
    return record(qps, p99);
  };
  double qps = start_qps;
  if (pass > 0 && qps <= pass) qps = 2 * pass;
  if (std::isfinite(fail) && qps >= fail) qps = fail / 2;
  // Bracket: double while passing, halve while failing (unless the seeds already bracket it).
  while (run < max_probes && !(pass > 0 && std::isfinite(fail))) {
    HYPIC_ASSIGN_OR_RETURN(bool ok, probe(qps));
    qps = ok ? 2 * qps : qps / 2;
  }
  // Bisect in log space.
  while (run < max_probes && pass > 0 && std::isfinite(fail) && fail / pass > 1.0 + rel_tolerance) {
    HYPIC_RETURN_IF_ERROR(probe(std::sqrt(pass * fail)).status());
  }
  return result;
}

}  // namespace hypic::tools

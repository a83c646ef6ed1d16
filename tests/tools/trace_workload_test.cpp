// The trace workload generator: determinism from the seed, and that each distribution has the
// shape the config asks for (document lengths, Zipf rank-frequency, k, query lengths, Poisson
// gaps, corpus updates).
#include "tools/hypic-bench/trace_workload.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "tests/support/check_ok.h"

namespace hypic::tools {
namespace {

TraceConfig SmallConfig() {
  TraceConfig c;
  c.n_docs = 300;
  c.n_requests = 400;
  c.qps = 4.0;
  c.seed = 42;
  return c;
}

bool SameTrace(const Trace& a, const Trace& b) {
  if (a.corpus != b.corpus || a.requests.size() != b.requests.size()) return false;
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const auto& x = a.requests[i];
    const auto& y = b.requests[i];
    if (x.docs != y.docs || x.query != y.query || x.arrival_s != y.arrival_s ||
        x.new_docs != y.new_docs) {
      return false;
    }
  }
  return true;
}

TEST_CASE("the same seed gives the same trace; another seed another one") {
  auto a = GenerateTrace(SmallConfig());
  auto b = GenerateTrace(SmallConfig());
  REQUIRE_OK(a);
  REQUIRE_OK(b);
  CHECK(SameTrace(*a, *b));

  TraceConfig other = SmallConfig();
  other.seed = 43;
  auto c = GenerateTrace(other);
  REQUIRE_OK(c);
  CHECK_FALSE(SameTrace(*a, *c));
}

TEST_CASE("more requests extend the trace without changing its beginning or the corpus") {
  TraceConfig shorter = SmallConfig();
  shorter.n_requests = 50;
  auto a = GenerateTrace(shorter);
  auto b = GenerateTrace(SmallConfig());
  REQUIRE_OK(a);
  REQUIRE_OK(b);
  for (uint32_t d = 0; d < a->initial_docs; ++d) CHECK(a->corpus[d] == b->corpus[d]);
  for (size_t i = 0; i < a->requests.size(); ++i) {
    CHECK(a->requests[i].docs == b->requests[i].docs);
    CHECK(a->requests[i].query == b->requests[i].query);
  }
}

TEST_CASE("rescaling arrivals keeps the request sequence and divides the times") {
  auto a = GenerateTrace(SmallConfig());
  REQUIRE_OK(a);
  Trace b = *a;
  RescaleArrivals(b, 8.0);
  CHECK(b.config.qps == 8.0);
  for (size_t i = 0; i < a->requests.size(); ++i) {
    CHECK(b.requests[i].docs == a->requests[i].docs);
    CHECK(b.requests[i].arrival_s == doctest::Approx(a->requests[i].arrival_s / 2.0));
  }
}

TEST_CASE("requests: k in range, no duplicate document, fresh query, valid ids") {
  TraceConfig c = SmallConfig();
  auto t = GenerateTrace(c);
  REQUIRE_OK(t);
  REQUIRE(t->requests.size() == c.n_requests);
  std::set<size_t> ks;
  double prev = 0;
  for (const auto& req : t->requests) {
    CHECK(req.docs.size() >= c.docs_min);
    CHECK(req.docs.size() <= c.docs_max);
    ks.insert(req.docs.size());
    std::set<uint32_t> unique(req.docs.begin(), req.docs.end());
    CHECK(unique.size() == req.docs.size());
    for (uint32_t d : req.docs) CHECK(d < t->corpus.size());
    CHECK(req.query.size() >= c.query_min);
    CHECK(req.query.size() <= c.query_max);
    for (uint32_t tok : req.query) {
      CHECK(tok >= 1);
      CHECK(tok < c.vocab);
    }
    CHECK(req.arrival_s > prev);
    prev = req.arrival_s;
  }
  // Uniform k over [10, 30] with 400 draws hits (nearly) every value.
  CHECK(ks.size() >= 18);
}

TEST_CASE("documents are shuffled: the most popular one is not always first") {
  TraceConfig c = SmallConfig();
  c.new_doc_share = 0;
  auto t = GenerateTrace(c);
  REQUIRE_OK(t);
  int with_top = 0;
  int top_first = 0;
  for (const auto& req : t->requests) {
    auto it = std::find(req.docs.begin(), req.docs.end(), 0u);
    if (it == req.docs.end()) continue;
    ++with_top;
    if (it == req.docs.begin()) ++top_first;
  }
  REQUIRE(with_top > 100);
  // Uniform placement among ~20 slots puts it first ~5% of the time.
  CHECK(top_first < with_top / 5);
}

TEST_CASE("document lengths: log-normal around the median, clipped to the range") {
  TraceConfig c = SmallConfig();
  c.n_docs = 4000;
  c.n_requests = 1;
  auto t = GenerateTrace(c);
  REQUIRE_OK(t);
  std::vector<size_t> lens;
  size_t at_max = 0;
  for (const auto& doc : t->corpus) {
    CHECK(doc.size() >= c.doc_len_min);
    CHECK(doc.size() <= c.doc_len_max);
    if (doc.size() == c.doc_len_max) ++at_max;
    lens.push_back(doc.size());
  }
  std::sort(lens.begin(), lens.end());
  const double median = static_cast<double>(lens[lens.size() / 2]);
  CHECK(median == doctest::Approx(c.doc_len_median).epsilon(0.05));
  // P(log-normal > 4x median) with sigma 0.6 is P(z > ln4/0.6 = 2.31) ~ 1.0%.
  CHECK(at_max > 10);
  CHECK(at_max < 100);
  // The spread in log space is sigma: the 84th percentile sits ~exp(0.6) above the median.
  const double p84 = static_cast<double>(lens[lens.size() * 84 / 100]);
  CHECK(std::log(p84 / median) == doctest::Approx(c.doc_len_sigma).epsilon(0.1));
}

TEST_CASE("popularity follows Zipf(alpha): rank-frequency slope and head ratios") {
  for (double alpha : {0.8, 1.2}) {
    CAPTURE(alpha);
    TraceConfig c = SmallConfig();
    c.n_docs = 500;
    c.docs_min = c.docs_max = 1;  // one draw per request: the pure Zipf law
    c.n_requests = 40000;
    c.new_doc_share = 0;
    c.zipf_alpha = alpha;
    auto t = GenerateTrace(c);
    REQUIRE_OK(t);
    std::vector<double> freq(c.n_docs, 0);
    for (const auto& req : t->requests) freq[req.docs[0]] += 1;
    CHECK(freq[0] / freq[1] == doctest::Approx(std::pow(2.0, alpha)).epsilon(0.1));
    // Least-squares slope of log f against log rank over the top 30 ranks.
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const int n = 30;
    for (int r = 0; r < n; ++r) {
      REQUIRE(freq[r] > 0);
      const double x = std::log(r + 1.0);
      const double y = std::log(freq[r]);
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
    }
    const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    CHECK(-slope == doctest::Approx(alpha).epsilon(0.08));
  }
}

TEST_CASE("Poisson arrivals: mean gap 1/qps, coefficient of variation ~1") {
  TraceConfig c = SmallConfig();
  c.n_requests = 5000;
  c.docs_min = c.docs_max = 1;
  auto t = GenerateTrace(c);
  REQUIRE_OK(t);
  double prev = 0, sum = 0, sum2 = 0;
  for (const auto& req : t->requests) {
    const double gap = req.arrival_s - prev;
    prev = req.arrival_s;
    sum += gap;
    sum2 += gap * gap;
  }
  const double mean = sum / c.n_requests;
  const double var = sum2 / c.n_requests - mean * mean;
  CHECK(mean == doctest::Approx(1.0 / c.qps).epsilon(0.05));
  CHECK(std::sqrt(var) / mean == doctest::Approx(1.0).epsilon(0.07));
}

TEST_CASE("corpus updates: the new-document share, and new versions are reused later") {
  TraceConfig c = SmallConfig();
  c.new_doc_share = 0.1;
  auto t = GenerateTrace(c);
  REQUIRE_OK(t);
  size_t slots = 0, fresh = 0, new_seen_again = 0;
  std::set<uint32_t> seen;
  for (const auto& req : t->requests) {
    uint32_t created = 0;
    for (uint32_t d : req.docs) {
      ++slots;
      if (d < t->initial_docs) continue;
      if (seen.insert(d).second) {
        ++created;
      } else {
        ++new_seen_again;
      }
    }
    CHECK(created == req.new_docs);
    fresh += created;
  }
  CHECK(t->corpus.size() == t->initial_docs + fresh);
  CHECK(static_cast<double>(fresh) / slots == doctest::Approx(0.1).epsilon(0.15));
  // A popular document that was updated keeps being requested, now in its new version.
  CHECK(new_seen_again > 0);

  c.new_doc_share = 0;
  auto none = GenerateTrace(c);
  REQUIRE_OK(none);
  CHECK(none->corpus.size() == c.n_docs);
}

TEST_CASE("invalid configs are rejected with the field named") {
  auto expect_bad = [](TraceConfig c, std::string_view field) {
    auto t = GenerateTrace(c);
    REQUIRE_FALSE(t.ok());
    CHECK(t.status().code() == StatusCode::kBadRequest);
    CHECK(t.status().message().find(field) != std::string::npos);
  };
  TraceConfig c = SmallConfig();
  c.docs_max = c.n_docs + 1;
  expect_bad(c, "docs_max");
  c = SmallConfig();
  c.qps = 0;
  expect_bad(c, "qps");
  c = SmallConfig();
  c.doc_len_min = 5000;
  expect_bad(c, "doc_len_min");
  c = SmallConfig();
  c.new_doc_share = 1.5;
  expect_bad(c, "new_doc_share");
}

}  // namespace
}  // namespace hypic::tools

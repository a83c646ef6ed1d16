#include "tools/hypic-bench/trace_workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>

namespace hypic::tools {

namespace {

// mt19937_64's output sequence is fixed by the standard; the std:: distributions are not, so the
// few we need are written out here.
class TraceRng {
 public:
  explicit TraceRng(uint64_t seed) : gen_(seed) {}

  // Uniform in [0, 1), 53 bits.
  double Unit() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }

  // Uniform in [lo, hi], inclusive, without modulo bias.
  uint32_t Int(uint32_t lo, uint32_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi) - lo + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t x = gen_();
    while (x >= limit) x = gen_();
    return lo + static_cast<uint32_t>(x % span);
  }

  double Normal() {  // Box-Muller; one value per call keeps the stream easy to reason about
    const double u1 = 1.0 - Unit();  // (0, 1]
    const double u2 = Unit();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

  double Exponential() { return -std::log1p(-Unit()); }  // mean 1

 private:
  std::mt19937_64 gen_;
};

// Independent streams per purpose, so that e.g. the corpus does not change with n_requests.
uint64_t StreamSeed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (stream + 1);  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::vector<uint32_t> MakeDocument(const TraceConfig& c, TraceRng& rng) {
  const double len = c.doc_len_median * std::exp(c.doc_len_sigma * rng.Normal());
  const auto n = static_cast<uint32_t>(std::clamp(
      std::lround(len), static_cast<long>(c.doc_len_min), static_cast<long>(c.doc_len_max)));
  std::vector<uint32_t> tokens(n);
  for (auto& t : tokens) t = rng.Int(1, c.vocab - 1);
  return tokens;
}

}  // namespace

Status TraceConfig::Validate() const {
  auto bad = [](std::string_view field, std::string_view why) {
    return BadRequest(fmt::format("trace config: {} {}", field, why));
  };
  if (n_docs == 0) return bad("n_docs", "must be > 0");
  if (!(doc_len_median > 0)) return bad("doc_len_median", "must be > 0");
  if (!(doc_len_sigma >= 0)) return bad("doc_len_sigma", "must be >= 0");
  if (doc_len_min == 0 || doc_len_min > doc_len_max) {
    return bad("doc_len_min/doc_len_max", "need 0 < min <= max");
  }
  if (!(zipf_alpha >= 0)) return bad("zipf_alpha", "must be >= 0");
  if (docs_min == 0 || docs_min > docs_max) return bad("docs_min/docs_max", "need 0 < min <= max");
  if (docs_max > n_docs) return bad("docs_max", "must be <= n_docs (no duplicates per request)");
  if (query_min == 0 || query_min > query_max) {
    return bad("query_min/query_max", "need 0 < min <= max");
  }
  if (!(new_doc_share >= 0 && new_doc_share <= 1)) return bad("new_doc_share", "must be in [0,1]");
  if (!(qps > 0)) return bad("qps", "must be > 0");
  if (vocab < 2) return bad("vocab", "must be >= 2");
  return Status::Ok();
}

size_t TraceRequest::PromptTokens(std::span<const std::vector<uint32_t>> corpus) const {
  size_t n = query.size();
  for (uint32_t d : docs) n += corpus[d].size();
  return n;
}

Result<Trace> GenerateTrace(const TraceConfig& config) {
  HYPIC_RETURN_IF_ERROR(config.Validate());
  Trace trace;
  trace.config = config;
  trace.initial_docs = config.n_docs;

  TraceRng corpus_rng(StreamSeed(config.seed, 0));
  trace.corpus.reserve(config.n_docs);
  for (uint32_t i = 0; i < config.n_docs; ++i)
    trace.corpus.push_back(MakeDocument(config, corpus_rng));

  // Popularity rank r (0 = most popular) has weight 1/(r+1)^alpha. rank_doc maps a rank to the
  // document currently holding it: a corpus update gives the rank a new document, so the new
  // version is what later requests for that rank see.
  std::vector<double> cdf(config.n_docs);
  double total = 0;
  for (uint32_t r = 0; r < config.n_docs; ++r) {
    total += std::pow(static_cast<double>(r) + 1.0, -config.zipf_alpha);
    cdf[r] = total;
  }
  std::vector<uint32_t> rank_doc(config.n_docs);
  for (uint32_t r = 0; r < config.n_docs; ++r) rank_doc[r] = r;

  TraceRng rng(StreamSeed(config.seed, 1));
  std::vector<char> taken(config.n_docs, 0);
  std::vector<uint32_t> ranks;
  double clock = 0;
  trace.requests.reserve(config.n_requests);
  for (uint32_t i = 0; i < config.n_requests; ++i) {
    TraceRequest req;
    clock += rng.Exponential();
    req.arrival_unit = clock;
    req.arrival_s = clock / config.qps;

    // Sampling without replacement by rejection: the same law as drawing one by one from the
    // renormalised remaining weights, and cheap because k << D in every realistic config.
    const uint32_t k = rng.Int(config.docs_min, config.docs_max);
    ranks.clear();
    while (ranks.size() < k) {
      const double u = rng.Unit() * total;
      const auto r =
          static_cast<uint32_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
      const uint32_t rank = std::min(r, config.n_docs - 1);
      if (taken[rank]) continue;
      taken[rank] = 1;
      ranks.push_back(rank);
    }
    // Draw order is biased towards popular documents; the prompt order must not be.
    for (size_t j = ranks.size(); j > 1; --j) std::swap(ranks[j - 1], ranks[rng.Int(0, j - 1)]);
    for (uint32_t rank : ranks) {
      taken[rank] = 0;
      if (config.new_doc_share > 0 && rng.Unit() < config.new_doc_share) {
        rank_doc[rank] = static_cast<uint32_t>(trace.corpus.size());
        trace.corpus.push_back(MakeDocument(config, rng));
        ++req.new_docs;
      }
      req.docs.push_back(rank_doc[rank]);
    }
    req.query.resize(rng.Int(config.query_min, config.query_max));
    for (auto& t : req.query) t = rng.Int(1, config.vocab - 1);
    trace.requests.push_back(std::move(req));
  }
  return trace;
}

void RescaleArrivals(Trace& trace, double qps) {
  trace.config.qps = qps;
  for (auto& req : trace.requests) req.arrival_s = req.arrival_unit / qps;
}

}  // namespace hypic::tools

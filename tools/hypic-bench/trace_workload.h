// The trace workload of `hypic-bench trace` (issue 8): a RAG-like request stream whose prompts are
// made of many independent documents in random order, so that a prefix cache rarely sees the
// same prefix twice while a position-independent cache sees the same segments again and again.
//
//   corpus   D documents, lengths log-normal around a median (default 1k tokens), clipped to a
//            range (default 256-4k); token ids uniform in [1, vocab).
//   request  k documents (default 10-30) drawn WITHOUT replacement from a Zipf(alpha)
//            popularity over the corpus, then shuffled, plus a fresh query of 32-128 tokens.
//            Each drawn slot is, with probability new_doc_share, a brand-new document instead
//            (appended to the corpus), which models corpus updates.
//   arrivals Poisson at `qps`: inter-arrival gaps are exponential. The gaps are kept in units of
//            the mean gap, so RescaleArrivals() replays the identical request sequence at any
//            other QPS (the sustainable-QPS search relies on this).
//
// Everything is a pure function of the config: the generator uses its own distributions on top
// of mt19937_64 (whose output the standard fixes), so a seed gives the same trace on every
// standard library. A Trace is a value; GenerateTrace is thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace hypic::tools {

struct TraceConfig {
  uint32_t n_docs = 2000;  // D, the initial corpus
  double doc_len_median = 1024;
  double doc_len_sigma = 0.6;  // of the underlying normal (log space)
  uint32_t doc_len_min = 256;
  uint32_t doc_len_max = 4096;
  double zipf_alpha = 1.0;
  uint32_t docs_min = 10;  // k per request, uniform in [docs_min, docs_max]
  uint32_t docs_max = 30;
  uint32_t query_min = 32;
  uint32_t query_max = 128;
  double new_doc_share = 0.05;  // probability that a drawn slot is a new document
  uint32_t n_requests = 200;
  double qps = 1.0;
  uint32_t vocab = 32000;
  uint64_t seed = 1;

  // BAD_REQUEST naming the field when a value is out of range or inconsistent.
  [[nodiscard]] Status Validate() const;
};

struct TraceRequest {
  double arrival_unit = 0;      // cumulative exponential gaps with mean 1 (rate-free)
  double arrival_s = 0;         // arrival_unit / qps: the request's scheduled start
  std::vector<uint32_t> docs;   // corpus indices, in prompt order, no duplicates
  std::vector<uint32_t> query;  // fresh tokens, never reused
  uint32_t new_docs = 0;        // how many of `docs` were created by this request

  // Tokens of the whole prompt (documents in order, then the query).
  size_t PromptTokens(std::span<const std::vector<uint32_t>> corpus) const;
};

struct Trace {
  TraceConfig config;
  uint32_t initial_docs = 0;  // docs [0, initial_docs) existed before the first request
  std::vector<std::vector<uint32_t>> corpus;
  std::vector<TraceRequest> requests;
};

[[nodiscard]] Result<Trace> GenerateTrace(const TraceConfig& config);

// Sets every request's arrival_s for a new offered rate; the sequence itself is unchanged.
// REQUIRES: qps > 0.
void RescaleArrivals(Trace& trace, double qps);

}  // namespace hypic::tools

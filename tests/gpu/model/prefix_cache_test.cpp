// The prefix-cache baseline (gpu/model/prefix_cache.h) is exact: whatever it restores, the
// logits equal a full prefill of the same prompt (within 1e-4), it reuses exactly the longest
// cached prefix of whole parts, tenants do not share, capacity bounds its memory, and a run
// past its deadline stops and keeps nothing.
#include "gpu/model/prefix_cache.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "gpu/model/generator.h"
#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic::model {
namespace {

std::shared_ptr<const Model> TinyModel() {
  auto config = PresetConfig("tiny");
  REQUIRE_OK(config);
  ModelWeights weights = GenerateWeights(*config, 7);
  return std::make_shared<const Model>(*config, std::move(weights), Hash128{1, 2});
}

ComposePart Part(std::vector<uint32_t> tokens) {
  ComposePart p;
  p.kind = ComposePart::Kind::kSegment;
  p.tokens = std::move(tokens);
  return p;
}

std::vector<float> FullLogits(const Model& model, const std::vector<ComposePart>& parts) {
  std::vector<uint32_t> all;
  for (const auto& p : parts) all.insert(all.end(), p.tokens.begin(), p.tokens.end());
  PrefillOptions opts;
  opts.want_state = false;
  auto r = model.FullPrefill(all, opts);
  REQUIRE_OK(r);
  return r->logits;
}

double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double scale = 0, diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return diff / std::max(scale, 1e-30);
}

TEST_CASE("prefix cache: repeated and extended prompts reproduce full-prefill logits") {
  auto model = TinyModel();
  const uint32_t vocab = static_cast<uint32_t>(model->config().vocab_size);
  testing::SeededRng rng(11);
  std::vector<std::vector<uint32_t>> docs;
  for (int i = 0; i < 4; ++i) docs.push_back(rng.Tokens(40 + 13 * i, vocab));
  const auto query = rng.Tokens(9, vocab);
  PrefixCache cache(model, {});

  const std::vector<ComposePart> prompt = {Part(docs[0]), Part(docs[1]), Part(docs[2]),
                                           Part(query)};
  const auto full = FullLogits(*model, prompt);

  // Real logits, not a degenerate constant: the comparisons below would be vacuous otherwise.
  REQUIRE(full.size() == model->config().vocab_size);
  CHECK(*std::max_element(full.begin(), full.end()) - *std::min_element(full.begin(), full.end()) >
        1.0f);

  auto cold = cache.Run("ns", prompt);
  REQUIRE_OK(cold);
  CHECK(cold->reused_parts == 0);
  CHECK(cold->checkpoints_added == 3);
  CHECK(MaxRelDiff(cold->logits, full) < 1e-4);

  // The identical request: every boundary but the last is restored; only the query runs.
  auto warm = cache.Run("ns", prompt);
  REQUIRE_OK(warm);
  CHECK(warm->reused_parts == 3);
  CHECK(warm->reused_tokens ==
        static_cast<int64_t>(docs[0].size() + docs[1].size() + docs[2].size()));
  CHECK(warm->computed_tokens == static_cast<int64_t>(query.size()));
  CHECK(warm->checkpoints_added == 0);
  CHECK(MaxRelDiff(warm->logits, full) < 1e-4);

  // A shared prefix of two parts, then new ones.
  const std::vector<ComposePart> branch = {Part(docs[0]), Part(docs[1]), Part(docs[3]),
                                           Part(query)};
  auto partial = cache.Run("ns", branch);
  REQUIRE_OK(partial);
  CHECK(partial->reused_parts == 2);
  CHECK(MaxRelDiff(partial->logits, FullLogits(*model, branch)) < 1e-4);

  // The same documents in another order share no prefix: a prefix cache cannot reuse them.
  const std::vector<ComposePart> shuffled = {Part(docs[1]), Part(docs[0]), Part(docs[2]),
                                             Part(query)};
  auto reordered = cache.Run("ns", shuffled);
  REQUIRE_OK(reordered);
  CHECK(reordered->reused_parts == 0);
  CHECK(MaxRelDiff(reordered->logits, FullLogits(*model, shuffled)) < 1e-4);

  // Another tenant does not see these checkpoints.
  auto other = cache.Run("other", prompt);
  REQUIRE_OK(other);
  CHECK(other->reused_parts == 0);

  const auto stats = cache.Stats();
  CHECK(stats.runs == 5);
  CHECK(stats.reused_parts == 5);
  // prompt 3 + branch 1 + shuffled 3 + other 3 nodes; the tree shares docs[0], docs[1].
  CHECK(stats.nodes == 10);
  CHECK(stats.bytes > 0);
}

TEST_CASE("prefix cache: a run past its deadline stops and keeps no checkpoint") {
  auto model = TinyModel();
  const uint32_t vocab = static_cast<uint32_t>(model->config().vocab_size);
  testing::SeededRng rng(6);
  const std::vector<ComposePart> prompt = {Part(rng.Tokens(30, vocab)), Part(rng.Tokens(30, vocab)),
                                           Part(rng.Tokens(5, vocab))};
  PrefixCache cache(model, {});
  auto late = cache.Run("ns", prompt, std::chrono::steady_clock::now() - std::chrono::seconds(1));
  REQUIRE(!late.ok());
  CHECK(late.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(cache.Stats().nodes == 0);
  // The next run starts cold and gives the full prefill's logits.
  auto in_time = cache.Run("ns", prompt, std::chrono::steady_clock::now() + std::chrono::hours(1));
  REQUIRE_OK(in_time);
  CHECK(in_time->reused_parts == 0);
  CHECK(in_time->checkpoints_added == 2);
  CHECK(MaxRelDiff(in_time->logits, FullLogits(*model, prompt)) < 1e-4);
}

TEST_CASE("prefix cache: capacity evicts least recently used leaves and stays exact") {
  auto model = TinyModel();
  const uint32_t vocab = static_cast<uint32_t>(model->config().vocab_size);
  testing::SeededRng rng(5);
  const auto a = rng.Tokens(30, vocab);
  const auto b = rng.Tokens(30, vocab);
  const auto q = rng.Tokens(5, vocab);

  PrefixCache probe(model, {});
  REQUIRE_OK(probe.Run("", std::vector<ComposePart>{Part(a), Part(b), Part(q)}));
  const uint64_t two_nodes = probe.Stats().bytes;
  REQUIRE(probe.Stats().nodes == 2);

  // Room for about two nodes: a third prompt's checkpoints push the oldest leaves out.
  PrefixCache cache(model, {.capacity_bytes = two_nodes + two_nodes / 4});
  std::vector<ComposePart> prompt;
  for (int round = 0; round < 3; ++round) {
    prompt = {Part(rng.Tokens(30, vocab)), Part(a), Part(q)};
    auto r = cache.Run("", prompt);
    REQUIRE_OK(r);
    CHECK(MaxRelDiff(r->logits, FullLogits(*model, prompt)) < 1e-4);
    const auto s = cache.Stats();
    CHECK(s.bytes <= s.capacity_bytes);
  }
  CHECK(cache.Stats().evictions > 0);
  // The most recent prompt's chain survived eviction and is reused.
  auto again = cache.Run("", prompt);
  REQUIRE_OK(again);
  CHECK(again->reused_parts == 2);
  CHECK(MaxRelDiff(again->logits, FullLogits(*model, prompt)) < 1e-4);
  cache.Clear();
  CHECK(cache.Stats().nodes == 0);
  CHECK(cache.Stats().bytes == 0);
}

TEST_CASE("prefix cache: bad prompts are BAD_REQUEST") {
  auto model = TinyModel();
  PrefixCache cache(model, {});
  CHECK(cache.Run("", {}).status().code() == StatusCode::kBadRequest);
  CHECK(cache.Run("", std::vector<ComposePart>{Part({})}).status().code() ==
        StatusCode::kBadRequest);
  const auto vocab = static_cast<uint32_t>(model->config().vocab_size);
  CHECK(cache.Run("", std::vector<ComposePart>{Part({1, vocab})}).status().code() ==
        StatusCode::kBadRequest);
  CHECK(cache.Stats().nodes == 0);
}

}  // namespace
}  // namespace hypic::model

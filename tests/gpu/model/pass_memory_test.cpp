// A pass's working memory (pass_memory.h): PassBytes against what the CPU passes allocate
// (prefills with and without state or every row's logits, a segment prefill's capture, a
// compose of cached entries, f32 and bf16 weights), and each optional part of it against what
// it is for; and the model's budget (ReadOptions::
// max_pass_bytes): a pass over it alone is refused kTooLarge before it allocates, one that
// a running pass leaves no room for kBusy, and the budget is whole again after each pass.
#include "gpu/model/pass_memory.h"

#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include "gpu/model/cpu_kernels.h"
#include "tests/gpu/model/model_test_util.h"

namespace hypic::model {
namespace {

std::vector<uint32_t> Tokens(int64_t n, uint32_t seed) {
  std::vector<uint32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (seed + 37 * i) % 500 + 3;
  return t;
}

uint64_t StateBytes(const ModelState& s) {
  uint64_t n = 0;
  for (const LayerState& l : s.layers)
    n += l.k.size() + l.v.size() + l.state.size() + l.conv.size();
  return 4 * n;
}

// Runs fn on a thread of its own, whose pass scratch starts empty, and returns what the
// pass's buffers took: the scratch the thread keeps afterwards plus what fn reports (the
// results it keeps).
template <typename Fn>
uint64_t MeasuredBytes(Fn&& fn) {
  uint64_t bytes = 0;
  std::thread t([&] {
    const uint64_t kept = fn();
    bytes = kept + CpuForwardKernels::ThreadScratchBytes();
  });
  t.join();
  return bytes;
}

TEST_CASE("PassBytes bounds what a CPU pass allocates, within 3x") {
  testing::ScratchDir dir;
  for (const WeightsDType weights : {WeightsDType::kF32, WeightsDType::kBf16}) {
    CAPTURE(static_cast<int>(weights));
    const auto m = testing::LoadTiny(dir.path(), {.dtype = DType::kBF16, .weights = weights});
    const ModelConfig& c = m->config();
    const auto check = [&](const char* what, const PassSize& size, uint64_t measured) {
      const uint64_t bound = PassBytes(c, size);
      INFO(what, ": measured ", measured, " bytes, bound ", bound);
      CHECK(measured > 0);
      CHECK(measured <= bound);
      CHECK(bound <= 3 * measured);
    };
    constexpr int64_t n = 1500;
    const auto tokens = Tokens(n, 1);
    // Each optional part of the bound covers what it is for, on its own: the state's caches,
    // every row's logits, the capture's entry.
    const PassSize plain{.live_rows = n, .positions = n, .logit_rows = 1};
    PassSize kept = plain, all_logits = plain, captured = plain;
    kept.state_kept = true;
    all_logits.logit_rows = n;
    captured.captured_rows = n - 8;
    {
      auto r = m->FullPrefill(tokens, {.all_logits = true, .want_state = true});
      REQUIRE_OK(r);
      uint64_t kv = 0;
      for (const LayerState& l : r->state.layers) kv += 4 * (l.k.size() + l.v.size());
      CHECK(kv > 0);
      CHECK(PassBytes(c, kept) - PassBytes(c, plain) >= kv);
      PassSize no_logits = plain;
      no_logits.logit_rows = 0;
      CHECK(PassBytes(c, all_logits) - PassBytes(c, no_logits) >= 4 * r->logits.size());
      auto e = m->SegmentPrefill(tokens, {.seam_w = 8});
      REQUIRE_OK(e);
      CHECK(PassBytes(c, captured) - PassBytes(c, plain) >= (*e)->TensorBytes());
    }
    check("prefill, last logits, state dropped", {.live_rows = n, .positions = n, .logit_rows = 1},
          MeasuredBytes([&] {
            auto r = m->FullPrefill(tokens, {.want_state = false});
            REQUIRE_OK(r);
            return 4 * r->logits.size();
          }));
    check("prefill, every row's logits, state kept",
          {.live_rows = n, .positions = n, .logit_rows = n, .state_kept = true}, MeasuredBytes([&] {
            auto r = m->FullPrefill(tokens, {.all_logits = true, .want_state = true});
            REQUIRE_OK(r);
            return 4 * r->logits.size() + StateBytes(r->state);
          }));
    check("segment prefill (capture)", {.live_rows = n, .positions = n, .captured_rows = n - 8},
          MeasuredBytes([&] {
            auto e = m->SegmentPrefill(tokens, {.seam_w = 8});
            REQUIRE_OK(e);
            return uint64_t{(*e)->TensorBytes()};
          }));
    // A compose of four cached segments of 600 tokens and a raw part of 200.
    std::vector<ComposePart> parts;
    for (uint32_t s = 0; s < 4; ++s) {
      ComposePart p{
          .kind = ComposePart::Kind::kSegment, .tokens = Tokens(600, 10 + s), .entry = {}};
      auto e = m->SegmentPrefill(p.tokens, {.seam_w = 8});
      REQUIRE_OK(e);
      p.entry = *e;
      parts.push_back(std::move(p));
    }
    parts.push_back({.kind = ComposePart::Kind::kRaw, .tokens = Tokens(200, 99), .entry = {}});
    check("compose, state kept",
          {.live_rows = 4 * 8 + 200,
           .positions = 2600,
           .cached_blocks = 4,
           .logit_rows = 1,
           .state_kept = true},
          MeasuredBytes([&] {
            auto r = m->Compose(parts, {.seam_w = 8, .want_state = true});
            REQUIRE_OK(r);
            return 4 * r->logits.size() + StateBytes(r->state);
          }));
  }
}

TEST_CASE("max_pass_bytes: TOO_LARGE over the limit, BUSY beside a running pass, whole after") {
  testing::ScratchDir dir;
  const auto tiny = testing::LoadTiny(dir.path());
  const PassSize small{.live_rows = 64, .positions = 64, .logit_rows = 1};
  // Room for a 64-token prefill, not for two, nor for a 4,000-token one.
  const uint64_t limit = PassBytes(tiny->config(), small) * 3 / 2;
  std::vector<int64_t> deltas;  // what ReadOptions::on_pass_bytes is told
  auto loaded = LoadModel(dir.path().string(), {},
                          {.weights = WeightsDType::kF32,
                           .max_pass_bytes = limit,
                           .on_pass_bytes = [&](int64_t d) { deltas.push_back(d); }});
  REQUIRE_OK(loaded);
  const auto& m = *loaded;
  CHECK(m->max_pass_bytes() == limit);

  const auto prompt = Tokens(64, 5);
  auto ok = m->FullPrefill(prompt, {.want_state = false});
  REQUIRE_OK(ok);
  CHECK(m->pass_bytes_in_use() == 0);
  const auto reserved = static_cast<int64_t>(PassBytes(m->config(), small));
  CHECK(deltas == std::vector<int64_t>{reserved, -reserved});

  auto big = m->FullPrefill(Tokens(4000, 6), {.want_state = false});
  REQUIRE(!big.ok());
  CHECK(big.status().code() == StatusCode::kTooLarge);
  CHECK(big.status().message().find("max_pass_bytes") != std::string::npos);
  CHECK(m->pass_bytes_in_use() == 0);

  // A pass started while another holds its reservation (from the first one's layer callback).
  std::vector<StatusCode> inner;
  auto outer = m->Compose(
      std::vector<ComposePart>{{.kind = ComposePart::Kind::kRaw, .tokens = prompt, .entry = {}}},
      {.on_layer = [&](uint32_t, std::span<const StateTensorView>) {
        if (inner.empty()) {
          CHECK(m->pass_bytes_in_use() > 0);
          inner.push_back(m->FullPrefill(prompt, {.want_state = false}).status().code());
        }
        return Status::Ok();
      }});
  REQUIRE_OK(outer);
  REQUIRE(inner.size() == 1);
  CHECK(inner[0] == StatusCode::kBusy);
  CHECK(m->pass_bytes_in_use() == 0);
  // The same logits as the model without a limit.
  auto free_run = tiny->FullPrefill(prompt, {.want_state = false});
  REQUIRE_OK(free_run);
  CHECK(ok->logits == free_run->logits);
}

}  // namespace
}  // namespace hypic::model

// Compose (MATH.md §5) on the tiny model, written and loaded through the real checkpoint path:
//  * exactness: with oracle entries it reproduces FullPrefill (last logits and every final
//    state within 1e-4) for 1-8 segments, short segments, raw prefix and suffix, both formats
//    (bf16-resident weights: bf16_weights_test.cpp);
//  * the two checkpoint formats of the same weights give identical logits;
//  * the PIC deviation is bounded: KL(full || hypic) well below KL(full || naive), and it falls
//    as the seam grows;
//  * entries are well-formed, and bad entries are refused with a message;
//  * on_layer (per-layer streaming) gets every layer once, in order, equal to the final state,
//    before the later layers run, and changes no bit of the logits or the state;
//  * a deadline stops the pass between layers (kDeadlineExceeded), and one not reached changes
//    nothing.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "core/segment_key.h"
#include "gpu/model/model.h"
#include "tests/gpu/model/model_test_util.h"
#include "tests/support/seeded_rng.h"

namespace hypic::model {
namespace {

using testing::RelErr;
using testing::ScratchDir;
using testing::TinyOptions;
using Kind = ComposePart::Kind;

std::vector<ComposePart> MakeParts(hypic::testing::SeededRng& rng, const Model& m,
                                   size_t raw_prefix, const std::vector<size_t>& segments,
                                   size_t suffix) {
  const auto vocab = static_cast<uint32_t>(m.config().vocab_size);
  std::vector<ComposePart> parts;
  if (raw_prefix > 0) parts.push_back({Kind::kRaw, rng.Tokens(raw_prefix, vocab), nullptr});
  for (size_t n : segments) parts.push_back({Kind::kSegment, rng.Tokens(n, vocab), nullptr});
  if (suffix > 0) parts.push_back({Kind::kRaw, rng.Tokens(suffix, vocab), nullptr});
  return parts;
}

// A raw prefix, two segments with their hypic entries (seam 8) and a raw suffix.
std::vector<ComposePart> PartsWithEntries(const Model& m, uint64_t seed) {
  hypic::testing::SeededRng rng(seed);
  auto parts = MakeParts(rng, m, 4, {30, 22}, 5);
  REQUIRE_OK(m.PrefillEntries(parts, ComposeMode::kHypic, {.seam_w = 8}));
  return parts;
}

std::vector<uint32_t> Concat(const std::vector<ComposePart>& parts) {
  std::vector<uint32_t> all;
  for (const auto& p : parts) all.insert(all.end(), p.tokens.begin(), p.tokens.end());
  return all;
}

ComposeResult Run(const Model& m, std::vector<ComposePart> parts, ComposeMode mode, uint32_t seam,
                  bool want_state = false) {
  REQUIRE_OK(m.PrefillEntries(parts, mode, {.seam_w = seam}));
  auto r = m.Compose(parts, {.mode = mode, .seam_w = seam, .want_state = want_state});
  REQUIRE_OK(r);
  return std::move(r).value();
}

void CheckOracleExact(const Model& m, const std::vector<ComposePart>& parts, uint32_t seam) {
  auto full = m.FullPrefill(Concat(parts));
  REQUIRE_OK(full);
  const ComposeResult got = Run(m, parts, ComposeMode::kOracle, seam, /*want_state=*/true);
  CHECK(RelErr(got.logits, full->logits) < 1e-4);
  REQUIRE(got.state.n_positions == full->state.n_positions);
  for (size_t li = 0; li < got.state.layers.size(); ++li) {
    const LayerState& a = got.state.layers[li];
    const LayerState& b = full->state.layers[li];
    CAPTURE(li);
    CHECK(RelErr(a.state, b.state) < 1e-4);
    CHECK(RelErr(a.conv, b.conv) < 1e-4);
    CHECK(RelErr(a.k, b.k) < 1e-4);
    CHECK(RelErr(a.v, b.v) < 1e-4);
  }
}

TEST_CASE("oracle Compose reproduces FullPrefill: segments, short segments, prefix, suffix") {
  for (WeightFormat format : {WeightFormat::kQwen3Next, WeightFormat::kQwen35}) {
    ScratchDir dir;
    auto m = testing::LoadTiny(dir.path(), {.format = format});
    hypic::testing::SeededRng rng(11);
    CAPTURE(WeightFormatName(format));
    SUBCASE("one segment and a query") { CheckOracleExact(*m, MakeParts(rng, *m, 0, {40}, 6), 8); }
    SUBCASE("raw prefix, three segments, suffix") {
      CheckOracleExact(*m, MakeParts(rng, *m, 5, {30, 70, 17}, 9), 8);
    }
    SUBCASE("eight segments with short ones (n <= w and n = w + 1)") {
      CheckOracleExact(*m, MakeParts(rng, *m, 0, {25, 4, 9, 33, 8, 12, 1, 20}, 5), 8);
    }
    SUBCASE("a segment last, no suffix") {
      CheckOracleExact(*m, MakeParts(rng, *m, 3, {21, 19}, 0), 8);
    }
    SUBCASE("seam 4") { CheckOracleExact(*m, MakeParts(rng, *m, 0, {30, 26, 11}, 3), 4); }
  }
}

TEST_CASE("Compose in full mode, and hypic with seam >= every segment, equal FullPrefill") {
  ScratchDir dir;
  auto m = testing::LoadTiny(dir.path());
  hypic::testing::SeededRng rng(5);
  const auto parts = MakeParts(rng, *m, 2, {10, 14, 7}, 4);
  auto full = m->FullPrefill(Concat(parts), {.want_state = false});
  REQUIRE_OK(full);
  CHECK(Run(*m, parts, ComposeMode::kFull, 8).logits == full->logits);
  const ComposeResult wide = Run(*m, parts, ComposeMode::kHypic, 14);
  CHECK(wide.cached_tokens == 0);
  CHECK(wide.logits == full->logits);
}

TEST_CASE("the last layer computes only the rows it outputs; the state covers every row") {
  for (WeightsDType weights : {WeightsDType::kF32, WeightsDType::kBf16}) {
    ScratchDir dir;
    auto m = testing::LoadTiny(dir.path(), {.dtype = DType::kBF16, .weights = weights});
    CAPTURE(WeightsDTypeName(weights));
    hypic::testing::SeededRng rng(21);
    const auto tokens = rng.Tokens(84, static_cast<uint32_t>(m->config().vocab_size));
    auto all = m->FullPrefill(tokens, {.all_logits = true});
    auto last = m->FullPrefill(tokens);
    auto state_only =
        m->Compose(std::vector<ComposePart>{{Kind::kRaw, tokens, nullptr}},
                   {.mode = ComposeMode::kFull, .want_state = true, .want_logits = false});
    REQUIRE_OK(all);
    REQUIRE_OK(last);
    REQUIRE_OK(state_only);
    CHECK(state_only->logits.empty());
    const auto vocab = static_cast<size_t>(m->config().vocab_size);
    REQUIRE(all->logits.size() == tokens.size() * vocab);
    const std::vector<float> all_last(all->logits.end() - static_cast<ptrdiff_t>(vocab),
                                      all->logits.end());
    // The last row through a last layer of the last 16 rows: the same bits as the whole pass.
    CHECK(last->logits == all_last);
    for (size_t li = 0; li < all->state.layers.size(); ++li) {
      CAPTURE(li);
      for (const ModelState* s : {&last->state, &state_only->state}) {
        const LayerState& a = s->layers[li];
        const LayerState& b = all->state.layers[li];
        CHECK(a.state == b.state);
        CHECK(a.conv == b.conv);
        CHECK(a.k == b.k);
        CHECK(a.v == b.v);
      }
    }
  }
}

TEST_CASE("a pass that drops its state reads K/V in place: the logits of one that keeps it") {
  // Compose and FullPrefill without a state attend the entries' K/V in place (rotated as read,
  // ForwardKernels::AttentionSpans) instead of copying them into the caches. Both kernels are
  // covered: bf16 products from 16 live rows (packed from the spans, blocks straddling them),
  // fp32 products below 16 or with f32 weights (gathered), bf16 entries widened first.
  const EntryDTypes bf16_entries{
      .transition = DType::kF32, .state = DType::kBF16, .conv = DType::kBF16, .kv = DType::kBF16};
  for (WeightsDType weights : {WeightsDType::kF32, WeightsDType::kBf16}) {
    ScratchDir dir;
    auto m = testing::LoadTiny(dir.path(), {.dtype = DType::kBF16, .weights = weights});
    hypic::testing::SeededRng rng(31);
    for (const EntryDTypes& entries : {EntryDTypes{}, bf16_entries}) {
      for (size_t suffix : {size_t{3}, size_t{40}}) {  // 11 and 48 live rows at seam 4
        CAPTURE(WeightsDTypeName(weights));
        CAPTURE(entries.ToString());
        CAPTURE(suffix);
        auto parts = MakeParts(rng, *m, 0, {300, 45}, suffix);
        REQUIRE_OK(
            m->PrefillEntries(parts, ComposeMode::kHypic, {.seam_w = 4, .entry_dtypes = entries}));
        auto kept =
            m->Compose(parts, {.mode = ComposeMode::kHypic, .seam_w = 4, .want_state = true});
        auto dropped = m->Compose(parts, {.mode = ComposeMode::kHypic, .seam_w = 4});
        REQUIRE_OK(kept);
        REQUIRE_OK(dropped);
        CHECK(dropped->cached_tokens > 0);
        CHECK(dropped->logits == kept->logits);
      }
    }
    const auto tokens = rng.Tokens(90, static_cast<uint32_t>(m->config().vocab_size));
    auto with_state = m->FullPrefill(tokens);
    auto without = m->FullPrefill(tokens, {.want_state = false});
    REQUIRE_OK(with_state);
    REQUIRE_OK(without);
    CHECK(without->logits == with_state->logits);
  }
}

TEST_CASE("the two checkpoint formats of the same weights give identical logits") {
  ScratchDir a, b;
  auto next = testing::LoadTiny(a.path(), {.format = WeightFormat::kQwen3Next, .seed = 9});
  auto q35 = testing::LoadTiny(b.path(), {.format = WeightFormat::kQwen35, .seed = 9});
  hypic::testing::SeededRng rng(2);
  const auto tokens = rng.Tokens(50, 512);
  auto x = next->FullPrefill(tokens, {.all_logits = true, .want_state = false});
  auto y = q35->FullPrefill(tokens, {.all_logits = true, .want_state = false});
  REQUIRE_OK(x);
  REQUIRE_OK(y);
  CHECK(x->logits == y->logits);
  CHECK(next->fingerprint() != q35->fingerprint());  // the names are part of the fingerprint
}

TEST_CASE("PIC deviation: hypic is far closer to full than naive add, and falls with the seam") {
  ScratchDir dir;
  auto m = testing::LoadTiny(dir.path());
  struct Setting {
    ComposeMode mode;
    uint32_t seam;
    double kl = 0.0;  // mean KL(full || setting) over the prompts
  };
  std::vector<Setting> s{{ComposeMode::kNaive, 8},
                         {ComposeMode::kHypic, 8},
                         {ComposeMode::kOracle, 8},
                         {ComposeMode::kHypic, 0},
                         {ComposeMode::kHypic, 32}};
  constexpr int kPrompts = 3;
  for (int p = 0; p < kPrompts; ++p) {
    hypic::testing::SeededRng rng(100 + static_cast<uint64_t>(p));
    const auto parts = MakeParts(rng, *m, 0, std::vector<size_t>(6, 48), 8);
    auto full = m->FullPrefill(Concat(parts), {.want_state = false});
    REQUIRE_OK(full);
    for (Setting& x : s)
      x.kl += testing::Kl(full->logits, Run(*m, parts, x.mode, x.seam).logits) / kPrompts;
  }
  const double naive = s[0].kl, hypic = s[1].kl, oracle = s[2].kl, w0 = s[3].kl, w32 = s[4].kl;
  MESSAGE("KL(full||naive) = " << naive << ", KL(full||hypic) = " << hypic
                               << ", KL(full||oracle) = " << oracle);
  MESSAGE("KL(full||hypic) by seam: w=0 " << w0 << ", w=8 " << hypic << ", w=32 " << w32);
  CHECK(oracle < 1e-8);
  CHECK(hypic > oracle);  // position-independent entries are an approximation
  CHECK(hypic * 5.0 < naive);
  CHECK(w0 > hypic);
  CHECK(hypic > w32);
}

TEST_CASE("SegmentPrefill entries: key, metadata, tensor shapes; short segments carry none") {
  ScratchDir dir;
  auto m = testing::LoadTiny(dir.path());
  const ModelConfig& c = m->config();
  hypic::testing::SeededRng rng(3);
  const auto tokens = rng.Tokens(30, 512);
  auto e = m->SegmentPrefill(tokens, {.seam_w = 8, .name_space = "t1"});
  REQUIRE_OK(e);
  const EntryMeta& meta = (*e)->meta();
  CHECK(meta.key == SegmentKey::Compute("t1", m->fingerprint(), meta.settings, tokens));
  CHECK(meta.model == m->fingerprint());
  CHECK(meta.settings.seam_w == 8);
  CHECK(meta.conv_k == 4);
  CHECK(meta.num_layers == c.num_layers);
  CHECK(meta.tokens == tokens);
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const auto layer = static_cast<uint32_t>(li);
    if (c.layer_kinds[static_cast<size_t>(li)] == LayerKind::kLinear) {
      const EntryTensor* t = (*e)->Find(layer, TensorKind::kTransition);
      REQUIRE(t != nullptr);
      CHECK(t->view.shape() == Shape{4, 16, 16});
      CHECK((*e)->Find(layer, TensorKind::kState)->view.shape() == Shape{4, 16, 16});
      CHECK((*e)->Find(layer, TensorKind::kConvTail)->view.shape() == Shape{3, c.conv_channels()});
      CHECK((*e)->Find(layer, TensorKind::kKey) == nullptr);
    } else {
      CHECK((*e)->Find(layer, TensorKind::kKey)->view.shape() == Shape{22, 2, 16});
      CHECK((*e)->Find(layer, TensorKind::kValue)->view.shape() == Shape{22, 2, 16});
    }
  }
  // The conv tail is the last K-1 pre-conv inputs, whatever came before: prefill the same
  // segment in a context and compare.
  ModelState context = m->EmptyState();
  REQUIRE_OK(m->Extend(context, rng.Tokens(12, 512)));
  auto in_context = m->SegmentPrefill(tokens, {.seam_w = 8, .name_space = "t1"}, &context);
  REQUIRE_OK(in_context);
  CHECK(context.n_positions == 42);
  const auto tail = [](const SegmentEntry& x) {
    const TensorView& v = x.Find(0, TensorKind::kConvTail)->view;
    return std::vector<float>(v.data_as<float>(), v.data_as<float>() + v.NumElements());
  };
  CHECK(RelErr(tail(**in_context), tail(**e)) < 1e-6);

  auto short_entry = m->SegmentPrefill(std::span(tokens).first(8), {.seam_w = 8});
  REQUIRE_OK(short_entry);
  CHECK((*short_entry)->tensors().empty());
  CHECK((*short_entry)->n_tokens() == 8);
}

TEST_CASE("Compose in consecutive runs (ComposeAfter, folds without logits) equals one Compose") {
  ScratchDir dir;
  auto m = testing::LoadTiny(dir.path());
  hypic::testing::SeededRng rng(8);
  auto parts = MakeParts(rng, *m, 3, {30, 5, 44, 21, 19}, 6);
  REQUIRE_OK(m->PrefillEntries(parts, ComposeMode::kHypic, {.seam_w = 8}));
  auto whole = m->Compose(parts, {.mode = ComposeMode::kHypic, .seam_w = 8, .want_state = true});
  REQUIRE_OK(whole);

  // Fold [0, 2), then [2, 5) (its last part is a cached segment), then the rest with logits.
  ModelState state = m->EmptyState();
  const std::span<const ComposePart> all(parts);
  const ComposeOptions fold{.mode = ComposeMode::kHypic, .seam_w = 8, .want_logits = false};
  auto first = m->ComposeAfter(state, all.subspan(0, 2), fold);
  REQUIRE_OK(first);
  CHECK(first->logits.empty());
  auto second = m->ComposeAfter(state, all.subspan(2, 3), fold);
  REQUIRE_OK(second);
  CHECK(second->cached_tokens == (44 - 8) + (21 - 8));  // the last part is jumped over too
  auto last = m->ComposeAfter(state, all.subspan(5), {.mode = ComposeMode::kHypic, .seam_w = 8});
  REQUIRE_OK(last);
  CHECK(first->cached_tokens + second->cached_tokens + last->cached_tokens == whole->cached_tokens);
  CHECK(RelErr(last->logits, whole->logits) < 1e-5);
  REQUIRE(state.n_positions == whole->state.n_positions);
  for (size_t li = 0; li < state.layers.size(); ++li) {
    CAPTURE(li);
    CHECK(RelErr(state.layers[li].state, whole->state.layers[li].state) < 1e-5);
    CHECK(RelErr(state.layers[li].k, whole->state.layers[li].k) < 1e-5);
  }
  // A fold of cached segments with seam 0 has no live token to run.
  auto seamless = parts;
  REQUIRE_OK(m->PrefillEntries(seamless, ComposeMode::kHypic, {.seam_w = 0}));
  ModelState s0 = m->EmptyState();
  auto none = m->ComposeAfter(s0, std::span<const ComposePart>(seamless).subspan(1, 2),
                              {.mode = ComposeMode::kHypic, .seam_w = 0, .want_logits = false});
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().message().find("no live tokens") != std::string::npos);
}

// What on_layer saw: the layer, and its two tensors' kinds, shapes and f32 data (copied: the
// views are valid only during the call).
struct Emitted {
  uint32_t layer = 0;
  std::vector<TensorKind> kinds;
  std::vector<Shape> shapes;
  std::vector<std::vector<float>> data;
};

Emitted Copy(uint32_t layer, std::span<const StateTensorView> tensors) {
  Emitted e{layer, {}, {}, {}};
  for (const StateTensorView& t : tensors) {
    REQUIRE(t.layer == layer);
    REQUIRE(t.dtype == DType::kF32);
    const auto* f = static_cast<const float*>(t.data);
    e.kinds.push_back(t.kind);
    e.shapes.push_back(t.shape);
    e.data.emplace_back(f, f + t.shape.NumElements());
  }
  return e;
}

// Every layer once, in order, each equal (bitwise) to that layer of `state` in the contract's
// tensors.
void CheckEmittedIsState(const Model& m, const std::vector<Emitted>& got, const ModelState& state) {
  REQUIRE(got.size() == static_cast<size_t>(m.config().num_layers));
  const std::vector<StateTensorView> want = StateTensors(m.config(), state);
  REQUIRE(want.size() == 2 * got.size());
  for (size_t l = 0; l < got.size(); ++l) {
    CAPTURE(l);
    CHECK(got[l].layer == l);
    REQUIRE(got[l].data.size() == 2);
    for (size_t j = 0; j < 2; ++j) {
      const StateTensorView& w = want[2 * l + j];
      CHECK(got[l].kinds[j] == w.kind);
      CHECK(got[l].shapes[j] == w.shape);
      const auto* f = static_cast<const float*>(w.data);
      CHECK(got[l].data[j] == std::vector<float>(f, f + w.shape.NumElements()));
    }
  }
}

TEST_CASE("on_layer hands over each layer's final state as soon as the pass has it") {
  ScratchDir dir;
  auto m = testing::LoadTiny(dir.path());
  const auto parts = PartsWithEntries(*m, 16);
  const ComposeOptions plain{.mode = ComposeMode::kHypic, .seam_w = 8, .want_state = true};
  auto reference = m->Compose(parts, plain);
  REQUIRE_OK(reference);
  const ModelConfig& c = m->config();

  SUBCASE("every layer once, in order, equal to the final state; the same logits and state") {
    for (ComposeMode mode : {ComposeMode::kHypic, ComposeMode::kFull}) {
      CAPTURE(ComposeModeName(mode));
      std::vector<Emitted> got;
      ComposeOptions o = plain;
      o.mode = mode;
      auto without = m->Compose(parts, o);
      REQUIRE_OK(without);
      o.on_layer = [&](uint32_t layer, std::span<const StateTensorView> tensors) {
        got.push_back(Copy(layer, tensors));
        return Status::Ok();
      };
      auto with = m->Compose(parts, o);
      REQUIRE_OK(with);
      CheckEmittedIsState(*m, got, with->state);
      CHECK(with->logits == without->logits);
      for (size_t l = 0; l < with->state.layers.size(); ++l) {
        CHECK(with->state.layers[l].state == without->state.layers[l].state);
        CHECK(with->state.layers[l].k == without->state.layers[l].k);
      }
      // Without the state kept, the layers still leave (a streaming caller's case).
      std::vector<Emitted> streamed;
      o.want_state = false;
      o.on_layer = [&](uint32_t layer, std::span<const StateTensorView> tensors) {
        streamed.push_back(Copy(layer, tensors));
        return Status::Ok();
      };
      auto light = m->Compose(parts, o);
      REQUIRE_OK(light);
      CHECK(light->state.layers.empty());
      CHECK(light->logits == without->logits);
      CheckEmittedIsState(*m, streamed, with->state);
    }
  }

  SUBCASE("layer i leaves before layer i + 1 runs: the later layers are untouched then") {
    // ComposeAfter advances the caller's state in place, so the callback can look at it.
    ModelState state = m->EmptyState();
    int calls = 0;
    ComposeOptions o = plain;
    o.on_layer = [&](uint32_t layer, std::span<const StateTensorView>) {
      CHECK(layer == static_cast<uint32_t>(calls));
      for (size_t later = layer + 1; later < state.layers.size(); ++later) {
        CAPTURE(later);
        const LayerState& ls = state.layers[later];
        if (c.layer_kinds[later] == LayerKind::kLinear) {
          CHECK(std::all_of(ls.state.begin(), ls.state.end(), [](float v) { return v == 0.0f; }));
        } else {
          CHECK(ls.k.empty());  // sized when the attention layer runs
        }
      }
      ++calls;
      return Status::Ok();
    };
    auto r = m->ComposeAfter(state, parts, o);
    REQUIRE_OK(r);
    CHECK(calls == c.num_layers);
    CHECK(r->logits == reference->logits);
  }

  SUBCASE("an error from on_layer stops the pass: no later layer, no logits") {
    int calls = 0;
    ComposeOptions o = plain;
    o.on_layer = [&](uint32_t, std::span<const StateTensorView>) {
      ++calls;
      return Cancelled("the connection closed");
    };
    auto r = m->Compose(parts, o);
    CHECK(r.status().code() == StatusCode::kCancelled);
    CHECK(calls == 1);
  }
}

TEST_CASE("a deadline stops a compose between layers; one not reached changes no bit") {
  ScratchDir dir;
  auto m = testing::LoadTiny(dir.path());
  const auto parts = PartsWithEntries(*m, 17);
  ComposeOptions o{.mode = ComposeMode::kHypic, .seam_w = 8};
  auto reference = m->Compose(parts, o);
  REQUIRE_OK(reference);

  o.deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
  auto in_time = m->Compose(parts, o);
  REQUIRE_OK(in_time);
  CHECK(in_time->logits == reference->logits);

  // Already past: the first layer runs, then the pass stops (no later layer hands its state).
  std::vector<uint32_t> layers;
  o.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  o.on_layer = [&](uint32_t layer, std::span<const StateTensorView>) {
    layers.push_back(layer);
    return Status::Ok();
  };
  auto late = m->Compose(parts, o);
  REQUIRE(!late.ok());
  CHECK(late.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(late.status().message().find("after layer 1 of") != std::string::npos);
  CHECK(layers == std::vector<uint32_t>{0});
}

TEST_CASE("Compose refuses bad requests and foreign entries, naming the problem") {
  ScratchDir dir;
  auto m = testing::LoadTiny(dir.path());
  hypic::testing::SeededRng rng(4);
  auto parts = MakeParts(rng, *m, 0, {20, 20}, 4);
  REQUIRE_OK(m->PrefillEntries(parts, ComposeMode::kHypic, {.seam_w = 8}));
  auto expect_bad = [&](const std::vector<ComposePart>& p, ComposeOptions o, const char* needle) {
    auto r = m->Compose(p, o);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kBadRequest);
    CHECK_MESSAGE(r.status().message().find(needle) != std::string::npos, r.status().ToString());
  };
  expect_bad({}, {}, "no parts");
  {
    auto p = parts;
    p[0].entry = nullptr;
    expect_bad(p, {}, "without an entry");
  }
  {
    auto p = parts;
    p[2].tokens[1] = 512;
    expect_bad(p, {}, "vocab_size");
  }
  expect_bad(parts, {.seam_w = 4}, "seam");
  {
    auto p = parts;
    p[0].tokens[3] ^= 1;
    expect_bad(p, {}, "different tokens");
  }
  {
    ScratchDir other_dir;
    auto other = testing::LoadTiny(other_dir.path(), {.seed = 2});
    auto p = parts;
    REQUIRE_OK(other->PrefillEntries(p, ComposeMode::kHypic, {.seam_w = 8}));
    expect_bad(p, {}, "belongs to model");
  }
  {
    // A tensor in device memory (as a device transport delivers it) is never read as host
    // memory: a CPU pass refuses the entry before touching it.
    const std::shared_ptr<const SegmentEntry> src = parts[0].entry;
    auto moved = std::make_shared<SegmentEntry>(src->meta());
    for (const EntryTensor& t : src->tensors()) {
      TensorView v = t.view;
      if (t.kind == TensorKind::kTransition) {
        v = TensorView(v.data(), v.dtype(), v.shape(), MemoryKind::kDevice, 0);
      }
      REQUIRE_OK(moved->AddView(t.layer, t.kind, v, src));
    }
    auto p = parts;
    p[0].entry = moved;
    expect_bad(p, {}, "in the memory of cuda:0; a pass on cpu");
  }
  CHECK(m->FullPrefill(std::vector<uint32_t>{}).status().code() == StatusCode::kBadRequest);
}

}  // namespace
}  // namespace hypic::model

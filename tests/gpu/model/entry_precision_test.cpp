// Entry precision (docs/entry-precision.md) on the tiny model:
//  * SegmentPrefill stores each tensor kind in its dtype of SegmentOptions::entry_dtypes, and a
//    bf16/f16 tensor is exactly the f32 capture rounded to nearest even;
//  * Compose from such entries equals, bitwise, Compose from f32 entries holding the rounded
//    values: the only change is the rounding, and Compose widens exactly;
//  * the dtypes are part of the key (the all-f32 key is unchanged) and survive Serialize/Parse;
//  * wrong dtypes are refused with a message; the config string parses or names its error.
#include <doctest/doctest.h>

#include <cstring>

#include "core/segment_key.h"
#include "gpu/backend.h"
#include "gpu/model/model.h"
#include "storage/entry_format.h"
#include "storage/hbm_tier.h"
#include "tests/gpu/model/model_test_util.h"
#include "tests/support/seeded_rng.h"

namespace hypic::model {
namespace {

using testing::ScratchDir;
using Kind = ComposePart::Kind;

constexpr uint32_t kSeam = 4;

DType KindDType(const EntryDTypes& d, TensorKind kind) {
  switch (kind) {
    case TensorKind::kTransition: return d.transition;
    case TensorKind::kState: return d.state;
    case TensorKind::kConvTail: return d.conv;
    default: return d.kv;
  }
}

// A copy of the f32 entry `e` whose tensors hold their values rounded to `d` and widened back,
// stored as f32 (so its settings and key are the f32 ones).
std::shared_ptr<SegmentEntry> RoundedAsF32(const SegmentEntry& e, const EntryDTypes& d) {
  auto out = std::make_shared<SegmentEntry>(e.meta());
  for (const EntryTensor& t : e.tensors()) {
    REQUIRE(t.view.dtype() == DType::kF32);
    const auto n = static_cast<size_t>(t.view.NumElements());
    std::vector<uint16_t> low(n);
    const DType to = KindDType(d, t.kind);
    auto v = out->AddTensor(t.layer, t.kind, DType::kF32, t.view.shape());
    REQUIRE_OK(v);
    if (to == DType::kF32) {
      std::memcpy(v->data(), t.view.data(), n * sizeof(float));
    } else {
      ConvertElements(DType::kF32, t.view.data(), to, low.data(), n);
      ConvertElements(to, low.data(), DType::kF32, v->data(), n);
    }
  }
  return out;
}

// Replaces `kind` of `layer` in a copy of `e` with a tensor of `dtype` (same shape).
std::shared_ptr<SegmentEntry> WithDType(const SegmentEntry& e, uint32_t layer, TensorKind kind,
                                        DType dtype) {
  auto out = std::make_shared<SegmentEntry>(e.meta());
  for (const EntryTensor& t : e.tensors()) {
    const bool swap = t.layer == layer && t.kind == kind;
    auto v = out->AddTensor(t.layer, t.kind, swap ? dtype : t.view.dtype(), t.view.shape());
    REQUIRE_OK(v);
    if (!swap) std::memcpy(v->data(), t.view.data(), t.view.NumBytes());
  }
  return out;
}

const std::vector<EntryDTypes>& LowPrecisionChoices() {
  static const std::vector<EntryDTypes> kChoices = {
      {DType::kBF16, DType::kBF16, DType::kBF16, DType::kBF16},
      {DType::kF16, DType::kF16, DType::kF16, DType::kF16},
      {DType::kF32, DType::kBF16, DType::kBF16, DType::kBF16},
      {DType::kF32, DType::kF32, DType::kF32, DType::kBF16},
      {DType::kF16, DType::kBF16, DType::kF32, DType::kF16},
  };
  return kChoices;
}

TEST_CASE("entries store each tensor kind in its dtype: the f32 capture rounded to nearest even") {
  ScratchDir dir;
  auto m = testing::LoadTiny(dir.path());
  hypic::testing::SeededRng rng(21);
  const auto tokens = rng.Tokens(40, static_cast<uint32_t>(m->config().vocab_size));
  auto f32 = m->SegmentPrefill(tokens, {.seam_w = kSeam, .name_space = "p"});
  REQUIRE_OK(f32);
  const SegmentKey f32_key = (*f32)->key();
  // The all-f32 key is the one hypic always computed.
  CHECK(f32_key == SegmentKey::Compute("p", m->fingerprint(), CacheSettings{kSeam, 1}, tokens));

  std::vector<SegmentKey> keys = {f32_key};
  for (const EntryDTypes& d : LowPrecisionChoices()) {
    INFO("entry dtypes ", d.ToString());
    auto low = m->SegmentPrefill(tokens, {.seam_w = kSeam, .name_space = "p", .entry_dtypes = d});
    REQUIRE_OK(low);
    const SegmentEntry& e = **low;
    CHECK(e.meta().settings.entry_dtypes == d);
    CHECK(e.key() == SegmentKey::Compute("p", m->fingerprint(), {kSeam, 1, d}, tokens));
    for (const SegmentKey& k : keys) CHECK(e.key() != k);
    keys.push_back(e.key());
    REQUIRE(e.tensors().size() == (*f32)->tensors().size());
    size_t f32_bytes = 0, low_bytes = 0;
    for (const EntryTensor& want : (*f32)->tensors()) {
      INFO("layer ", want.layer, " ", TensorKindName(want.kind));
      const EntryTensor* got = e.Find(want.layer, want.kind);
      REQUIRE(got != nullptr);
      const DType dtype = KindDType(d, want.kind);
      CHECK(got->view.dtype() == dtype);
      CHECK(got->view.shape() == want.view.shape());
      f32_bytes += want.view.NumBytes();
      low_bytes += got->view.NumBytes();
      // Bitwise the f32 capture rounded (RNE) into the dtype.
      const auto n = static_cast<size_t>(want.view.NumElements());
      std::vector<std::byte> rounded(n * DTypeSize(dtype));
      ConvertElements(DType::kF32, want.view.data(), dtype, rounded.data(), n);
      CHECK(std::memcmp(got->view.data(), rounded.data(), rounded.size()) == 0);
    }
    CHECK(e.TensorBytes() == low_bytes);
    CHECK(low_bytes < f32_bytes);
  }
}

TEST_CASE("Compose from bf16/f16 entries is exactly Compose from the rounded f32 entries") {
  ScratchDir dir;
  auto m = testing::LoadTiny(dir.path());
  hypic::testing::SeededRng rng(22);
  const auto vocab = static_cast<uint32_t>(m->config().vocab_size);
  std::vector<ComposePart> prompt;
  prompt.push_back({Kind::kRaw, rng.Tokens(5, vocab), nullptr});
  for (size_t n : {30, 3, 45, 20})
    prompt.push_back({Kind::kSegment, rng.Tokens(n, vocab), nullptr});
  prompt.push_back({Kind::kRaw, rng.Tokens(6, vocab), nullptr});
  const ComposeOptions options{.mode = ComposeMode::kHypic, .seam_w = kSeam, .want_state = true};

  auto f32 = prompt;
  REQUIRE_OK(m->PrefillEntries(f32, ComposeMode::kHypic, {.seam_w = kSeam}));
  auto f32_result = m->Compose(f32, options);
  REQUIRE_OK(f32_result);
  for (const EntryDTypes& d : LowPrecisionChoices()) {
    INFO("entry dtypes ", d.ToString());
    auto low = prompt;
    REQUIRE_OK(m->PrefillEntries(low, ComposeMode::kHypic, {.seam_w = kSeam, .entry_dtypes = d}));
    auto rounded = f32;
    for (ComposePart& p : rounded) {
      if (p.entry != nullptr) p.entry = RoundedAsF32(*p.entry, d);
    }
    for (ComposeMode mode : {ComposeMode::kHypic, ComposeMode::kNaive}) {
      ComposeOptions o = options;
      o.mode = mode;
      auto got = m->Compose(low, o);
      auto want = m->Compose(rounded, o);
      REQUIRE_OK(got);
      REQUIRE_OK(want);
      REQUIRE(got->logits.size() == want->logits.size());
      CHECK(std::memcmp(got->logits.data(), want->logits.data(),
                        want->logits.size() * sizeof(float)) == 0);
      REQUIRE(got->state.layers.size() == want->state.layers.size());
      for (size_t li = 0; li < want->state.layers.size(); ++li) {
        const LayerState& a = got->state.layers[li];
        const LayerState& b = want->state.layers[li];
        CHECK(a.state == b.state);
        CHECK(a.conv == b.conv);
        CHECK(a.k == b.k);
        CHECK(a.v == b.v);
      }
    }
    // And the rounding moves the answer, but not far on this model (the figures that choose
    // the daemon's default are in docs/entry-precision.md).
    auto got = m->Compose(low, options);
    REQUIRE_OK(got);
    CHECK(testing::RelErr(got->logits, f32_result->logits) < 0.05);
  }
}

TEST_CASE("entry dtypes survive Serialize and Parse; the parsed entry composes the same") {
  ScratchDir dir;
  auto m = testing::LoadTiny(dir.path());
  hypic::testing::SeededRng rng(23);
  const auto vocab = static_cast<uint32_t>(m->config().vocab_size);
  const EntryDTypes d{DType::kF32, DType::kBF16, DType::kF16, DType::kBF16};
  std::vector<ComposePart> parts = {{Kind::kSegment, rng.Tokens(30, vocab), nullptr},
                                    {Kind::kRaw, rng.Tokens(5, vocab), nullptr}};
  REQUIRE_OK(m->PrefillEntries(parts, ComposeMode::kHypic, {.seam_w = kSeam, .entry_dtypes = d}));
  auto bytes = storage::Serialize(*parts[0].entry);
  REQUIRE_OK(bytes);
  auto info = storage::ReadEntryInfo((*bytes)->span());
  REQUIRE_OK(info);
  CHECK(info->settings.entry_dtypes == d);
  auto parsed = storage::Parse(*bytes);
  REQUIRE_OK(parsed);
  CHECK((*parsed)->key() == parts[0].entry->key());
  CHECK((*parsed)->meta().settings.entry_dtypes == d);
  for (const EntryTensor& t : (*parsed)->tensors()) CHECK(t.view.dtype() == KindDType(d, t.kind));

  auto via_store = parts;
  via_store[0].entry = *parsed;
  auto want = m->Compose(parts, {.seam_w = kSeam});
  auto got = m->Compose(via_store, {.seam_w = kSeam});
  REQUIRE_OK(want);
  REQUIRE_OK(got);
  CHECK(got->logits == want->logits);

  // An all-f32 entry writes zeros where the dtypes go: its bytes are those of earlier builds.
  auto f32 = m->SegmentPrefill(parts[0].tokens, {.seam_w = kSeam});
  REQUIRE_OK(f32);
  auto f32_bytes = storage::Serialize(**f32);
  REQUIRE_OK(f32_bytes);
  for (size_t i = 104; i < 120; ++i) CHECK((*f32_bytes)->span()[i] == std::byte{0});
}

// Compose with the entry read where the HBM tier holds it (tier.h's ParseHandle over the tier's
// own copy) against Compose with the entry parsed from host bytes: the same logits, bit for bit,
// on `device`. On the CPU backend the tier's memory is host memory (the views' offsets and the
// prefix parsing are what is checked); on a CUDA device the views are device memory, read in
// place, the bf16/f16 tensors widened there by a kernel.
void CheckComposeFromHbm(gpu::Backend& backend, const ComputeDevice& device) {
  ScratchDir dir;
  auto m = testing::LoadTiny(dir.path());
  hypic::testing::SeededRng rng(29);
  const auto vocab = static_cast<uint32_t>(m->config().vocab_size);
  for (const EntryDTypes& d :
       {EntryDTypes{}, EntryDTypes{DType::kF32, DType::kBF16, DType::kF16, DType::kBF16}}) {
    INFO("entry dtypes ", d.ToString());
    std::vector<ComposePart> parts = {{Kind::kSegment, rng.Tokens(30, vocab), nullptr},
                                      {Kind::kSegment, rng.Tokens(20, vocab), nullptr},
                                      {Kind::kRaw, rng.Tokens(5, vocab), nullptr}};
    REQUIRE_OK(m->PrefillEntries(parts, ComposeMode::kHypic, {.seam_w = kSeam, .entry_dtypes = d}));
    auto tier = storage::HbmTier::Create(backend, device.index, uint64_t{64} << 20);
    REQUIRE_OK(tier);
    auto from_host = parts, in_place = parts;
    for (size_t i = 0; i < 2; ++i) {
      auto bytes = storage::Serialize(*parts[i].entry);
      REQUIRE_OK(bytes);
      auto host = storage::MakeHostHandle(*bytes);
      REQUIRE_OK(host);
      REQUIRE_OK((*tier)->Insert(**host));
      auto parsed = storage::Parse(*bytes);
      REQUIRE_OK(parsed);
      from_host[i].entry = *parsed;
      auto handle = (*tier)->Lookup(parts[i].entry->key());
      REQUIRE_OK(handle);
      auto viewed = storage::ParseHandle(*handle);
      REQUIRE_OK(viewed);
      for (const EntryTensor& t : (*viewed)->tensors()) {
        CHECK(t.view.memory() == (*handle)->device->memory());
      }
      in_place[i].entry = *viewed;
    }
    for (ComposeMode mode : {ComposeMode::kHypic, ComposeMode::kNaive}) {
      const ComposeOptions options{.mode = mode, .seam_w = kSeam, .device = device};
      auto want = m->Compose(from_host, options);
      auto got = m->Compose(in_place, options);
      REQUIRE_OK(want);
      REQUIRE_OK(got);
      CHECK(got->logits == want->logits);
    }
  }
}

TEST_CASE("an entry read in place from the HBM tier composes as its host bytes do (CPU backend)") {
  CheckComposeFromHbm(gpu::CpuBackend(), {});
}

TEST_CASE("an entry read in place from the HBM tier composes as its host bytes do (CUDA)") {
  const ComputeDevice cuda{gpu::BackendKind::kCuda, 0};
  gpu::Backend* backend = gpu::FindBackend(gpu::BackendKind::kCuda);
  if (backend == nullptr || !CheckComputeDevice(cuda).ok()) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  CheckComposeFromHbm(*backend, cuda);
}

TEST_CASE("Compose refuses entry tensors of a non-float dtype or another than their settings") {
  ScratchDir dir;
  auto m = testing::LoadTiny(dir.path());
  hypic::testing::SeededRng rng(24);
  const auto vocab = static_cast<uint32_t>(m->config().vocab_size);
  std::vector<ComposePart> parts = {{Kind::kSegment, rng.Tokens(30, vocab), nullptr},
                                    {Kind::kRaw, rng.Tokens(5, vocab), nullptr}};
  REQUIRE_OK(m->PrefillEntries(parts, ComposeMode::kHypic, {.seam_w = kSeam}));
  const SegmentEntry& e = *parts[0].entry;
  uint32_t linear = 0, attention = 0;
  for (uint32_t li = 0; li < e.meta().num_layers; ++li) {
    (m->config().layer_kinds[li] == LayerKind::kLinear ? linear : attention) = li;
  }
  auto expect_bad = [&](std::shared_ptr<SegmentEntry> bad, const char* a, const char* b) {
    auto p = parts;
    p[0].entry = std::move(bad);
    auto r = m->Compose(p, {.seam_w = kSeam});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kBadRequest);
    CHECK_MESSAGE(r.status().message().find(a) != std::string::npos, r.status().ToString());
    CHECK_MESSAGE(r.status().message().find(b) != std::string::npos, r.status().ToString());
  };
  expect_bad(WithDType(e, linear, TensorKind::kTransition, DType::kI32), "I32",
             "not an entry dtype");
  expect_bad(WithDType(e, attention, TensorKind::kValue, DType::kU8), "U8", "not an entry dtype");
  // A bf16 tensor in an entry whose settings (and key) say f32 is not what its key promises.
  expect_bad(WithDType(e, linear, TensorKind::kState, DType::kBF16), "BF16", "settings");

  auto r =
      m->SegmentPrefill(parts[0].tokens, {.seam_w = kSeam, .entry_dtypes = {.kv = DType::kI64}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kBadRequest);
  CHECK(r.status().message().find("I64") != std::string::npos);
}

TEST_CASE("EntryDTypes: the config string, its errors, the precision order") {
  auto parse = [](std::string_view s) {
    auto d = EntryDTypes::Parse(s);
    REQUIRE_OK(d);
    return *d;
  };
  const EntryDTypes bf16{DType::kBF16, DType::kBF16, DType::kBF16, DType::kBF16};
  CHECK(parse("f32").AllF32());
  CHECK(parse("bf16") == bf16);
  CHECK(parse(" BF16 ") == bf16);
  CHECK(parse("kv=bf16") == EntryDTypes{.kv = DType::kBF16});
  CHECK(parse("bf16,t=f32") == EntryDTypes{DType::kF32, DType::kBF16, DType::kBF16, DType::kBF16});
  CHECK(parse("t=f32, s=fp16, conv=f32, kv=bf16") ==
        EntryDTypes{DType::kF32, DType::kF16, DType::kF32, DType::kBF16});
  CHECK(parse("transition=f16,state=bf16") == EntryDTypes{DType::kF16, DType::kBF16});
  for (const EntryDTypes& d : LowPrecisionChoices()) CHECK(parse(d.ToString()) == d);
  CHECK(EntryDTypes{}.ToString() == "t=f32,s=f32,conv=f32,kv=f32");

  auto bad = [](std::string_view s, const char* needle) {
    auto d = EntryDTypes::Parse(s);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == StatusCode::kBadRequest);
    CHECK_MESSAGE(d.status().message().find(needle) != std::string::npos, d.status().ToString());
  };
  bad("", "empty");
  bad("bf16,", "empty");
  bad("i32", "'i32' is not a dtype");
  bad("kv=int8", "'int8'");
  bad("q=bf16", "unknown tensor kind 'q'");
  bad("kv=bf16,kv=f16", "'kv' is given twice");
  bad("kv=bf16,f16", "may only come first");

  CHECK(EntryDTypes{}.AtLeastAsPrecise(bf16));
  CHECK(bf16.AtLeastAsPrecise(bf16));
  CHECK_FALSE(bf16.AtLeastAsPrecise(EntryDTypes{}));
  CHECK_FALSE(parse("f16").AtLeastAsPrecise(bf16));
  CHECK(parse("kv=bf16").AtLeastAsPrecise(parse("bf16")));
  CHECK_FALSE(parse("kv=bf16").AtLeastAsPrecise(parse("s=bf16")));
}

}  // namespace
}  // namespace hypic::model

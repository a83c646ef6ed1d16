// The CUDA model backend against the CPU one (issue 4): every pass, on the tiny preset in both
// checkpoint formats with both MLP kinds, within 1e-4 relative:
//  * FullPrefill: every row's logits and the final state;
//  * SegmentPrefill: every tensor of the entry (T, S(C|0), conv tail, K, V);
//  * Compose in hypic and oracle modes: the last logits and the composed state;
//  * bf16/f16 entries: captured on the device (rounded after the write-back) within one
//    rounding step of the CPU's, and composed on the device (widened on the host) as on the CPU.
// Without a device (or without CUDA in the build) it reports "skipped: no CUDA device"; the
// device-selection errors are checked in every build.
#include "gpu/model/cuda_forward.h"

#include <doctest/doctest.h>

#include "gpu/model/model.h"
#include "tests/gpu/model/model_test_util.h"
#include "tests/support/seeded_rng.h"

namespace hypic::model {
namespace {

using testing::RelErr;
using testing::ScratchDir;
using testing::TinyOptions;
using Kind = ComposePart::Kind;

constexpr ComputeDevice kCuda{gpu::BackendKind::kCuda, 0};
constexpr double kBound = 1e-4;

void CheckStates(const ModelState& got, const ModelState& want) {
  REQUIRE(got.layers.size() == want.layers.size());
  CHECK(got.n_positions == want.n_positions);
  for (size_t li = 0; li < want.layers.size(); ++li) {
    INFO("layer ", li);
    const LayerState& g = got.layers[li];
    const LayerState& w = want.layers[li];
    CHECK(RelErr(g.state, w.state) <= kBound);
    CHECK(RelErr(g.conv, w.conv) <= kBound);
    CHECK(RelErr(g.k, w.k) <= kBound);
    CHECK(RelErr(g.v, w.v) <= kBound);
  }
}

std::vector<float> TensorValues(const EntryTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.view.NumElements()));
  ConvertElements(t.view.dtype(), t.view.data(), DType::kF32, out.data(), out.size());
  return out;
}

void CheckEntries(const SegmentEntry& got, const SegmentEntry& want) {
  REQUIRE(got.tensors().size() == want.tensors().size());
  for (const EntryTensor& w : want.tensors()) {
    INFO("layer ", w.layer, " ", TensorKindName(w.kind));
    const EntryTensor* g = got.Find(w.layer, w.kind);
    REQUIRE(g != nullptr);
    CHECK(RelErr(TensorValues(*g), TensorValues(w)) <= kBound);
  }
}

void RunConformance(const Model& m, uint64_t seed) {
  hypic::testing::SeededRng rng(seed);
  const auto vocab = static_cast<uint32_t>(m.config().vocab_size);

  const std::vector<uint32_t> tokens = rng.Tokens(150, vocab);
  auto cpu = m.FullPrefill(tokens, {.all_logits = true});
  auto gpu = m.FullPrefill(tokens, {.all_logits = true, .device = kCuda});
  REQUIRE_OK(cpu);
  REQUIRE_OK(gpu);
  CHECK(RelErr(gpu->logits, cpu->logits) <= kBound);
  CheckStates(gpu->state, cpu->state);

  const SegmentOptions seg{.seam_w = 8};
  SegmentOptions seg_gpu = seg;
  seg_gpu.device = kCuda;
  auto cpu_entry = m.SegmentPrefill(tokens, seg);
  auto gpu_entry = m.SegmentPrefill(tokens, seg_gpu);
  REQUIRE_OK(cpu_entry);
  REQUIRE_OK(gpu_entry);
  CheckEntries(**gpu_entry, **cpu_entry);

  // Low-precision entries: the device's capture is the device's fp32 rounded, so it is within
  // one bf16 rounding step (2^-8 relative) of the CPU's on top of the fp32 bound.
  const EntryDTypes low{DType::kF32, DType::kBF16, DType::kF16, DType::kBF16};
  SegmentOptions low_cpu = seg, low_gpu = seg_gpu;
  low_cpu.entry_dtypes = low_gpu.entry_dtypes = low;
  auto cpu_low = m.SegmentPrefill(tokens, low_cpu);
  auto gpu_low = m.SegmentPrefill(tokens, low_gpu);
  REQUIRE_OK(cpu_low);
  REQUIRE_OK(gpu_low);
  for (const EntryTensor& w : (*cpu_low)->tensors()) {
    INFO("low precision: layer ", w.layer, " ", TensorKindName(w.kind));
    const EntryTensor* g = (*gpu_low)->Find(w.layer, w.kind);
    REQUIRE(g != nullptr);
    CHECK(g->view.dtype() == w.view.dtype());
    CHECK(RelErr(TensorValues(*g), TensorValues(w)) <= kBound + 1.0 / 256);
  }
  {
    std::vector<ComposePart> parts;
    for (size_t n : {40, 70}) parts.push_back({Kind::kSegment, rng.Tokens(n, vocab), nullptr});
    parts.push_back({Kind::kRaw, rng.Tokens(6, vocab), nullptr});
    REQUIRE_OK(m.PrefillEntries(parts, ComposeMode::kHypic, low_cpu));
    auto want = m.Compose(parts, {.seam_w = 8, .want_state = true});
    auto got = m.Compose(parts, {.seam_w = 8, .want_state = true, .device = kCuda});
    REQUIRE_OK(want);
    REQUIRE_OK(got);
    CHECK(RelErr(got->logits, want->logits) <= kBound);
    CheckStates(got->state, want->state);
  }

  for (ComposeMode mode : {ComposeMode::kHypic, ComposeMode::kOracle}) {
    INFO("mode ", std::string(ComposeModeName(mode)));
    std::vector<ComposePart> parts;
    parts.push_back({Kind::kRaw, rng.Tokens(5, vocab), nullptr});
    for (size_t n : {40, 9, 70}) parts.push_back({Kind::kSegment, rng.Tokens(n, vocab), nullptr});
    parts.push_back({Kind::kRaw, rng.Tokens(6, vocab), nullptr});
    // The entries are the CPU's, so the compose itself is what is compared.
    REQUIRE_OK(m.PrefillEntries(parts, mode, seg));
    auto want = m.Compose(parts, {.mode = mode, .seam_w = 8, .want_state = true});
    auto got = m.Compose(parts, {.mode = mode, .seam_w = 8, .want_state = true, .device = kCuda});
    REQUIRE_OK(want);
    REQUIRE_OK(got);
    CHECK(got->live_tokens == want->live_tokens);
    CHECK(RelErr(got->logits, want->logits) <= kBound);
    CheckStates(got->state, want->state);
  }
}

TEST_CASE("CUDA passes match the CPU passes on the tiny model") {
  if (!CheckComputeDevice(kCuda).ok()) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  uint64_t seed = 11;
  for (WeightFormat format : {WeightFormat::kQwen3Next, WeightFormat::kQwen35}) {
    for (MlpKind mlp : {MlpKind::kMoe, MlpKind::kDense}) {
      INFO("format ", std::string(WeightFormatName(format)), " mlp ", static_cast<int>(mlp));
      ScratchDir dir;
      auto m = testing::LoadTiny(dir.path(), TinyOptions{.format = format, .mlp = mlp});
      RunConformance(*m, seed++);
    }
  }
}

TEST_CASE("a pass on an unusable device fails cleanly") {
  ScratchDir dir;
  auto m = testing::LoadTiny(dir.path());
  const std::vector<uint32_t> tokens = {1, 2, 3};
  const ComputeDevice absent{gpu::BackendKind::kCuda, 4096};
  auto r = m->FullPrefill(tokens, {.device = absent});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() ==
        (CudaModelKernelsBuilt() ? StatusCode::kNotFound : StatusCode::kUnsupported));
  auto c = m->Compose(std::vector<ComposePart>{{Kind::kRaw, tokens, nullptr}},
                      {.mode = ComposeMode::kFull, .device = absent});
  CHECK_FALSE(c.ok());
  if (!CudaModelKernelsBuilt()) {
    CHECK(m->FullPrefill(tokens, {.device = kCuda}).status().code() == StatusCode::kUnsupported);
  }
}

TEST_CASE("device names parse") {
  auto cpu = ParseComputeDevice("cpu");
  REQUIRE_OK(cpu);
  CHECK(*cpu == ComputeDevice{});
  auto cuda = ParseComputeDevice("cuda");
  REQUIRE_OK(cuda);
  CHECK(*cuda == ComputeDevice{gpu::BackendKind::kCuda, 0});
  auto three = ParseComputeDevice("cuda:3");
  REQUIRE_OK(three);
  CHECK(three->index == 3);
  CHECK(ComputeDeviceName(*three) == "cuda:3");
  CHECK(ComputeDeviceName(*cpu) == "cpu");
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:1x", "cuda3", "CPU"}) {
    INFO(bad);
    CHECK(ParseComputeDevice(bad).status().code() == StatusCode::kBadRequest);
  }
  CHECK_OK(CheckComputeDevice(ComputeDevice{}));
}

}  // namespace
}  // namespace hypic::model

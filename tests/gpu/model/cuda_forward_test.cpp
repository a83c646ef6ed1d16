// The CUDA model backend against the CPU one (issue 4): every pass, on the tiny preset in both
// checkpoint formats with both MLP kinds, within 1e-4 relative:
//  * FullPrefill: every row's logits and the final state;
//  * SegmentPrefill: every tensor of the entry (T, S(C|0), conv tail, K, V);
//  * Compose in hypic and oracle modes: the last logits and the composed state;
//  * bf16/f16 entries: captured on the device (rounded after the write-back) within one
//    rounding step of the CPU's, and composed on the device (widened on the host) as on the CPU.
// And the Attention step alone against CausalAttention's fp32 path, within 1e-4 relative: the
// tiled prefill path (head_dim 64 and 128, prompts up to 4096 rows, GQA, rows after a cached
// prefix, ragged sizes, other head sizes) and the split-K path (few rows over up to 16k keys).
// Without a device (or without CUDA in the build) it reports "skipped: no CUDA device"; the
// device-selection errors are checked in every build.
#include "gpu/model/cuda_forward.h"

#include <doctest/doctest.h>

#include "gpu/model/attention_tile_math.h"
#include "gpu/model/cpu_attention.h"
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

// One Attention call: q [rows, heads, hd], k/v [positions.back() + 1, kv_heads, hd].
struct AttentionCase {
  AttentionShape shape;
  std::vector<int64_t> positions;
  bool split;  // the plan takes the split-K path
};

std::vector<int64_t> Contiguous(int64_t from, int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = from + i;
  return p;
}

std::vector<AttentionCase> AttentionCases() {
  std::vector<int64_t> seams;  // compose-like rows: short runs spread over 16k keys
  for (int64_t s = 0; s < 3; ++s) {
    for (int64_t i = 0; i < 4; ++i) seams.push_back(s * 5000 + i);
  }
  for (int64_t i = 0; i < 4; ++i) seams.push_back(16380 + i);
  return {
      {{16, 2, 64}, Contiguous(0, 4096), false},     // Qwen3-Next's heads, hd 64
      {{8, 2, 128}, Contiguous(0, 4096), false},     // hd 128, GQA 4
      {{4, 4, 128}, Contiguous(0, 1000), false},     // MHA
      {{8, 2, 128}, Contiguous(3000, 1000), false},  // after a 3000-token cached prefix
      {{8, 1, 64}, Contiguous(17, 333), false},      // ragged rows and keys
      {{4, 2, 16}, Contiguous(0, 150), false},       // the tiny model's
      {{2, 1, 96}, Contiguous(5, 100), false},       // head_dim not a power of two
      {{2, 2, 256}, Contiguous(0, 200), false},      // the largest head_dim
      {{8, 2, 128}, Contiguous(16383, 1), true},     // decode over 16k keys
      {{8, 2, 128}, Contiguous(16376, 8), true},
      {{16, 2, 64}, Contiguous(4984, 16), true},  // kSplitKMaxRows rows over 5000 keys
      {{8, 2, 64}, seams, true},
      {{4, 4, 256}, Contiguous(2999, 2), true},
  };
}

TEST_CASE("CUDA attention matches CausalAttention: tiles, GQA, split-K") {
  if (!CheckComputeDevice(kCuda).ok()) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  const ModelWeights none;  // the Attention step reads no weights
  auto ctx = CreateCudaContext(none, 0);
  REQUIRE_OK(ctx);
  uint64_t seed = 40;
  for (const AttentionCase& c : AttentionCases()) {
    const AttentionShape& sh = c.shape;
    const auto rows = static_cast<int64_t>(c.positions.size());
    const int64_t keys = c.positions.back() + 1;
    CAPTURE(sh.heads);
    CAPTURE(sh.kv_heads);
    CAPTURE(sh.head_dim);
    CAPTURE(rows);
    CAPTURE(keys);
    REQUIRE(PlanAttentionTiles(sh.heads, sh.kv_heads, rows, keys).split() == c.split);
    hypic::testing::SeededRng rng(seed++);
    const std::vector<float> q =
        rng.NormalVector(static_cast<size_t>(rows * sh.heads * sh.head_dim));
    const std::vector<float> k =
        rng.NormalVector(static_cast<size_t>(keys * sh.kv_heads * sh.head_dim));
    const std::vector<float> v =
        rng.NormalVector(static_cast<size_t>(keys * sh.kv_heads * sh.head_dim));
    std::vector<float> want(q.size()), got(q.size(), -1.0f);
    std::vector<uint32_t> pack;
    CausalAttention(sh, q.data(), k.data(), v.data(), want.data(), c.positions, &pack);

    auto kernels = CreateCudaForwardKernels(*ctx);
    REQUIRE_OK(kernels);
    ForwardKernels& dev = **kernels;
    const auto n = [](const std::vector<float>& x) { return static_cast<int64_t>(x.size()); };
    const float* dq = dev.Input(q.data(), n(q));
    const float* dk = dev.Input(k.data(), n(k));
    const float* dv = dev.Input(v.data(), n(v));
    float* dout = dev.Mirror(got.data(), n(got), false);
    dev.Attention(sh, dq, dk, dv, dout, c.positions);
    REQUIRE_OK(dev.Finish());
    CHECK(RelErr(got, want) <= kBound);
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

// The CUDA model backend against the CPU one (issues 4 and 15): every pass, on the tiny preset
// in both checkpoint formats with both MLP kinds, within 1e-4 relative:
//  * FullPrefill: every row's logits and the final state;
//  * SegmentPrefill: every tensor of the entry (T, S(C|0), conv tail, K, V);
//  * Compose in hypic and oracle modes: the last logits and the composed state;
//  * bf16/f16 entries: captured on the device (rounded after the write-back) within one
//    rounding step of the CPU's, and composed on the device (widened on the host) as on the CPU.
// A bf16 checkpoint kept in bf16: the device's cuBLASLt prefill against the CPU's bf16 one
// (last-token logits within 3e-2, top-1 agreement on 251 of 256 rows, as bf16_weights_test).
// Gemm alone in fp32, TF32 and bf16; MoeExperts alone (device routing, ties included, and the
// tiled grouped GEMMs) against the CPU's.
// And the Attention step alone against CausalAttention's fp32 path, within 1e-4 relative: the
// tiled prefill path (head_dim 64 and 128, prompts up to 4096 rows, GQA, rows after a cached
// prefix, ragged sizes, other head sizes) and the split-K path (few rows over up to 16k keys).
// Without a device (or without CUDA in the build) it reports "skipped: no CUDA device"; the
// device-selection errors are checked in every build.
#include "gpu/model/cuda_forward.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "gpu/model/attention_tile_math.h"
#include "gpu/model/cpu_attention.h"
#include "gpu/model/cpu_kernels.h"
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

// The `small` preset's shapes (dk = dv = 64 with 8 value heads, attention head_dim 64, 8 MoE
// experts) at the prompt lengths a deployment sees: a 4,096-token prefill and a compose of
// 3 x 1,024 + 32 on the f32 path, every logit and state within the fp32 bound.
TEST_CASE("CUDA passes match the CPU passes on the small preset, 4k-token prompts") {
  if (!CheckComputeDevice(kCuda).ok()) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  ScratchDir dir;
  auto loaded = LoadModel("builtin:small", dir.path(), {.weights = WeightsDType::kF32});
  REQUIRE_OK(loaded);
  const Model& m = **loaded;
  const auto vocab = static_cast<uint32_t>(m.config().vocab_size);
  hypic::testing::SeededRng rng(41);
  const auto prompt = rng.Tokens(4096, vocab);
  auto want = m.FullPrefill(prompt);
  auto got = m.FullPrefill(prompt, {.device = kCuda});
  REQUIRE_OK(want);
  REQUIRE_OK(got);
  CHECK(RelErr(got->logits, want->logits) <= kBound);
  CheckStates(got->state, want->state);

  std::vector<ComposePart> parts;
  for (int i = 0; i < 3; ++i) parts.push_back({Kind::kSegment, rng.Tokens(1024, vocab), nullptr});
  parts.push_back({Kind::kRaw, rng.Tokens(32, vocab), nullptr});
  REQUIRE_OK(m.PrefillEntries(parts, ComposeMode::kHypic, {.seam_w = 8}));
  auto cpu = m.Compose(parts, {.seam_w = 8, .want_state = true});
  auto gpu = m.Compose(parts, {.seam_w = 8, .want_state = true, .device = kCuda});
  REQUIRE_OK(cpu);
  REQUIRE_OK(gpu);
  CHECK(RelErr(gpu->logits, cpu->logits) <= kBound);
  CheckStates(gpu->state, cpu->state);
}

size_t Argmax(const float* x, int64_t n) {
  return static_cast<size_t>(std::max_element(x, x + n) - x);
}

// A bf16 checkpoint kept in bf16 (weights_dtype bf16): the device's bf16 cuBLASLt GEMMs against
// the CPU's bf16 oneDNN ones, within the bounds bf16_weights_test.cpp holds the bf16 path to
// against f32. Both round the same activations to bf16 and accumulate in fp32, so they differ
// by summation order, and by the bf16 flips and MoE top-k ties a last-bit difference can tip.
TEST_CASE("CUDA bf16 passes match the CPU bf16 path on the tiny model") {
  if (!CheckComputeDevice(kCuda).ok()) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  for (WeightFormat format : {WeightFormat::kQwen3Next, WeightFormat::kQwen35}) {
    for (MlpKind mlp : {MlpKind::kMoe, MlpKind::kDense}) {
      INFO("format ", std::string(WeightFormatName(format)), " mlp ", static_cast<int>(mlp));
      ScratchDir dir;
      auto m = testing::LoadTiny(
          dir.path(),
          TinyOptions{
              .format = format, .mlp = mlp, .dtype = DType::kBF16, .weights = WeightsDType::kBf16});
      REQUIRE(m->weights_dtype() == DType::kBF16);
      hypic::testing::SeededRng rng(31);
      const int64_t vocab = m->config().vocab_size;
      const auto tokens = rng.Tokens(256, static_cast<uint32_t>(vocab));
      auto cpu = m->FullPrefill(tokens, {.all_logits = true, .want_state = false});
      auto gpu = m->FullPrefill(tokens, {.all_logits = true, .want_state = false, .device = kCuda});
      REQUIRE_OK(cpu);
      REQUIRE_OK(gpu);
      REQUIRE(gpu->logits.size() == cpu->logits.size());
      int agree = 0;
      for (int64_t r = 0; r < 256; ++r) {
        agree += Argmax(gpu->logits.data() + r * vocab, vocab) ==
                         Argmax(cpu->logits.data() + r * vocab, vocab)
                     ? 1
                     : 0;
      }
      const std::vector<float> last_gpu(gpu->logits.end() - vocab, gpu->logits.end());
      const std::vector<float> last_cpu(cpu->logits.end() - vocab, cpu->logits.end());
      const double rel = RelErr(last_gpu, last_cpu);
      MESSAGE("CUDA bf16 vs CPU bf16: last-token logits rel " << rel << ", top-1 agreement "
                                                              << agree << "/256");
      CHECK(rel < 3e-2);
      CHECK(agree >= 251);
    }
  }
}

// Gemm alone, on a context holding one weight of each precision: fp32 (exact products, or TF32
// with allow_tf32) and bf16 against CpuForwardKernels::Gemm on the same weights. fp32 and bf16
// differ from the CPU by summation order only (bf16: the same rounded operands); TF32 rounds
// both operands to 10 mantissa bits (2^-11 relative each).
TEST_CASE("CUDA GEMMs: fp32 and bf16 match the CPU's, TF32 within its rounding") {
  if (!CheckComputeDevice(kCuda).ok()) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  constexpr int64_t n = 257, k = 512, ldx = 520;
  hypic::testing::SeededRng rng(50);
  ModelWeights w;
  w.lm_head = WeightTensor(DType::kF32, static_cast<size_t>(n * k));
  w.embed = WeightTensor(DType::kBF16, static_cast<size_t>(n * k));
  for (size_t i = 0; i < static_cast<size_t>(n * k); ++i) {
    w.lm_head.f32()[i] = rng.Normal();
    w.embed.bf16()[i] = F32ToBf16(rng.Normal());
  }
  for (bool tf32 : {false, true}) {
    auto ctx = CreateCudaContext(w, 0, {.allow_tf32 = tf32});
    REQUIRE_OK(ctx);
    for (int64_t m : {1, 300}) {
      for (bool accumulate : {false, true}) {
        for (const WeightTensor* t : {&w.lm_head, &w.embed}) {
          CAPTURE(tf32);
          CAPTURE(m);
          CAPTURE(accumulate);
          CAPTURE(DTypeName(t->dtype()));
          const std::vector<float> x = rng.NormalVector(static_cast<size_t>(m * ldx));
          const std::vector<float> y0 = rng.NormalVector(static_cast<size_t>(m * n));
          std::vector<float> want = y0, got = y0;
          CpuForwardKernels cpu;
          cpu.Gemm(m, n, k, x.data(), ldx, cpu.Weight(*t), k, want.data(), n, accumulate, nullptr);
          auto kernels = CreateCudaForwardKernels(*ctx);
          REQUIRE_OK(kernels);
          ForwardKernels& dev = **kernels;
          const float* dx = dev.Input(x.data(), m * ldx);
          float* dy = dev.Mirror(got.data(), m * n, /*read=*/true);
          dev.Gemm(m, n, k, dx, ldx, dev.Weight(*t), k, dy, n, accumulate);
          REQUIRE_OK(dev.Finish());
          const bool rounded = tf32 && t->dtype() == DType::kF32;
          CHECK(RelErr(got, want) <= (rounded ? 4.0 / 2048 : kBound));
        }
      }
    }
  }
}

// MoeExperts alone: the device's routing (moe_routing.h's RouteRow per row, on the device) and
// grouped experts against the CPU's, on random router logits with planted ties, over decode-
// to prefill-sized row counts (16- to 128-row tiles), up to 512 experts. A row routed
// differently would be off by a whole expert's output; fp32 experts agree to summation order,
// bf16 ones up to a flip of one bf16 rounding (2^-8) in an activation.
TEST_CASE("CUDA MoE routing and experts match the CPU's, ties included") {
  if (!CheckComputeDevice(kCuda).ok()) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  constexpr int64_t hidden = 64, im = 32;
  struct Case {
    int64_t experts, top_k, rows;
  };
  uint64_t seed = 60;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const Case& c : {Case{16, 4, 1}, Case{16, 4, 37}, Case{16, 2, 700}, Case{64, 8, 129},
                          Case{512, 8, 64}, Case{512, 10, 300}, Case{8, 1, 50}}) {
      for (bool norm : {true, false}) {
        CAPTURE(DTypeName(dtype));
        CAPTURE(c.experts);
        CAPTURE(c.top_k);
        CAPTURE(c.rows);
        CAPTURE(norm);
        hypic::testing::SeededRng rng(seed++);
        ModelWeights w;
        w.layers.resize(1);
        std::vector<MlpWeights>& experts = w.layers[0].moe.experts;
        experts.resize(static_cast<size_t>(c.experts));
        for (MlpWeights& e : experts) {
          e.intermediate = im;
          for (auto [t, size] : {std::pair{&e.gate_up, 2 * im * hidden}, {&e.down, hidden * im}}) {
            *t = WeightTensor(dtype, static_cast<size_t>(size));
            for (size_t i = 0; i < static_cast<size_t>(size); ++i) {
              const float v = rng.Normal(0.0f, 0.2f);
              if (dtype == DType::kBF16) {
                t->bf16()[i] = F32ToBf16(v);
              } else {
                t->f32()[i] = v;
              }
            }
          }
        }
        const std::vector<float> x = rng.NormalVector(static_cast<size_t>(c.rows * hidden));
        std::vector<float> logits = rng.NormalVector(static_cast<size_t>(c.rows * c.experts));
        for (int64_t r = 0; r < c.rows; r += 3) {  // ties: equal logits, a third of the rows
          float* row = logits.data() + r * c.experts;
          for (int64_t e = 1; e < c.experts; e += 2) row[e] = row[e - 1];
        }
        if (c.rows > 1) std::fill_n(logits.begin() + c.experts, c.experts, 0.25f);  // all tied

        std::vector<float> want(x.size()), got(x.size(), -1.0f);
        CpuForwardKernels cpu;
        std::vector<ExpertWeights> cpu_experts;
        for (const MlpWeights& e : experts) {
          cpu_experts.push_back({cpu.Weight(e.gate_up), cpu.Weight(e.down)});
        }
        cpu.MoeExperts({.x = x.data(),
                        .logits = logits.data(),
                        .rows = c.rows,
                        .hidden = hidden,
                        .intermediate = im,
                        .top_k = c.top_k,
                        .norm_topk_prob = norm,
                        .experts = cpu_experts,
                        .y = want.data()});
        REQUIRE_OK(cpu.Finish());

        auto ctx = CreateCudaContext(w, 0);
        REQUIRE_OK(ctx);
        auto kernels = CreateCudaForwardKernels(*ctx);
        REQUIRE_OK(kernels);
        ForwardKernels& dev = **kernels;
        std::vector<ExpertWeights> dev_experts;
        for (const MlpWeights& e : experts) {
          dev_experts.push_back({dev.Weight(e.gate_up), dev.Weight(e.down)});
        }
        dev.MoeExperts({.x = dev.Input(x.data(), static_cast<int64_t>(x.size())),
                        .logits = dev.Input(logits.data(), static_cast<int64_t>(logits.size())),
                        .rows = c.rows,
                        .hidden = hidden,
                        .intermediate = im,
                        .top_k = c.top_k,
                        .norm_topk_prob = norm,
                        .experts = dev_experts,
                        .y = dev.Mirror(got.data(), static_cast<int64_t>(got.size()), false)});
        REQUIRE_OK(dev.Finish());
        CHECK(RelErr(got, want) <= (dtype == DType::kBF16 ? 1.0 / 256 : kBound));
      }
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
    AlignedVector<uint32_t> pack;
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

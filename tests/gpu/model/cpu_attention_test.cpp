// CausalAttention against a float64 softmax attention, in both precisions of its products, and
// the properties the compose relies on: a row's output does not depend on which other rows share
// the call, nor on the thread count; K/V spans of bf16 entries give the bits of their widened
// fp32 copies; a rope span's K, rotated as it is read, the bits of the same K rotated first.
#include "gpu/model/cpu_attention.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "gpu/cpu/compute_threads.h"
#include "gpu/model/cpu_kernels.h"
#include "tests/gpu/model/attention_problem.h"

namespace hypic::model {
namespace {

using testing::AttentionProblem;
using testing::Contiguous;
using testing::MakeAttentionProblem;

float RoundBf16(float x) { return Bf16ToF32(F32ToBf16(x)); }

// float64 softmax attention; with bf16 operands q (scaled), k and v are first rounded as the
// bf16 kernel rounds them.
std::vector<double> Reference(const AttentionProblem& c, bool bf16_operands) {
  const int64_t nh = c.shape.heads, hd = c.shape.head_dim, group = nh / c.shape.kv_heads;
  const int64_t ldq = nh * hd, ldk = c.shape.kv_heads * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto op = [&](float x) { return static_cast<double>(bf16_operands ? RoundBf16(x) : x); };
  std::vector<double> out(c.q.size());
  for (size_t r = 0; r < c.positions.size(); ++r) {
    const int64_t keys = c.positions[r] + 1;
    for (int64_t h = 0; h < nh; ++h) {
      const int64_t g = h / group;
      std::vector<double> s(static_cast<size_t>(keys));
      double mx = -1e300;
      for (int64_t j = 0; j < keys; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) {
          const float qs =
              bf16_operands ? c.q[r * ldq + h * hd + d] * scale : c.q[r * ldq + h * hd + d];
          dot += op(qs) * op(c.k[j * ldk + g * hd + d]);
        }
        s[static_cast<size_t>(j)] = bf16_operands ? dot : dot * scale;
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      double sum = 0;
      for (double& x : s) sum += x = std::exp(x - mx);
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < keys; ++j) {
          acc += s[static_cast<size_t>(j)] * op(c.v[j * ldk + g * hd + d]);
        }
        out[r * ldq + h * hd + d] = acc / sum;
      }
    }
  }
  return out;
}

std::vector<float> Run(const AttentionProblem& c, bool bf16, int threads) {
  cpu::ScopedComputeThreads budget(threads);
  AttentionShape shape = c.shape;
  shape.bf16_products = bf16;
  std::vector<float> out(c.q.size(), -1.0f);
  AlignedVector<uint32_t> pack;
  CausalAttention(shape, c.q.data(), c.k.data(), c.v.data(), out.data(), c.positions, &pack);
  return out;
}

double MaxAbsError(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::abs(got[i] - want[i]));
  return e;
}

double MaxAbs(const std::vector<float>& x) {
  double m = 0;
  for (float f : x) m = std::max(m, static_cast<double>(std::abs(f)));
  return m;
}

// Every tested shape: the small model's (8 heads over 2, hd 64, twice), the tiny model's (hd 16),
// hd 128, 256 and 48 (every column chunk of the PV kernel), MHA; rows that are not a multiple of
// the tiles, key counts that cross the key blocks, and a compose-like set of rows (seams spread
// over a long context).
std::vector<AttentionProblem> Cases() {
  std::vector<AttentionProblem> cases;
  cases.push_back(MakeAttentionProblem(8, 2, 64, Contiguous(0, 300), 1));
  // A last key block of 24 keys: two key groups, under the four the hd-64 QK step takes.
  cases.push_back(MakeAttentionProblem(8, 2, 64, Contiguous(0, 280), 7));
  cases.push_back(MakeAttentionProblem(4, 1, 128, Contiguous(0, 157), 2));
  cases.push_back(MakeAttentionProblem(2, 2, 256, Contiguous(0, 70), 3));
  cases.push_back(MakeAttentionProblem(4, 2, 16, Contiguous(0, 90), 5));  // the tiny model's
  cases.push_back(
      MakeAttentionProblem(2, 1, 48, Contiguous(0, 40), 6));  // chunks of 2 and 1 vectors
  std::vector<int64_t> seams;
  for (int64_t s = 0; s < 6; ++s) {
    for (int64_t i = 0; i < 5; ++i) seams.push_back(s * 97 + i);
  }
  for (int64_t i = 0; i < 9; ++i) seams.push_back(600 + i);
  cases.push_back(MakeAttentionProblem(8, 2, 64, seams, 4));
  return cases;
}

TEST_CASE("fp32 products match a float64 attention") {
  for (const AttentionProblem& c : Cases()) {
    CAPTURE(c.shape.head_dim);
    CAPTURE(c.positions.size());
    const double err = MaxAbsError(Run(c, false, 2), Reference(c, false));
    CHECK(err <= 1e-5 * MaxAbs(c.v));
  }
}

TEST_CASE(
    "bf16 products: within the probabilities' rounding of a float64 attention on the "
    "rounded operands") {
  if (!HasBf16Attention(64)) {
    MESSAGE(
        "skipped: no AVX512-BF16 attention kernel in this build or under the ISA cap (bf16 "
        "falls back to fp32)");
    return;
  }
  for (const AttentionProblem& c : Cases()) {
    CAPTURE(c.shape.head_dim);
    CAPTURE(c.positions.size());
    REQUIRE(HasBf16Attention(c.shape.head_dim));
    // With q, k and v rounded as the kernel rounds them, what remains is each probability's
    // bf16 rounding (relative 2^-9: |sum_j p_j d_j v_j| / sum_j p_j <= 2^-9 max |v|) and fp32
    // accumulation (1e-5 leaves it two orders of magnitude).
    const std::vector<float> got = Run(c, true, 2);
    const double bound = (std::ldexp(1.0, -9) + 1e-5) * MaxAbs(c.v);
    CHECK(MaxAbsError(got, Reference(c, true)) <= bound);
    // And the kernel did round: against the unrounded operands it is off by more than fp32.
    CHECK(MaxAbsError(got, Reference(c, false)) > 1e-4 * MaxAbs(c.v));
  }
}

TEST_CASE("a row's output does not depend on the call's other rows nor on the thread count") {
  for (bool bf16 : {false, true}) {
    CAPTURE(bf16);
    const AttentionProblem all = MakeAttentionProblem(8, 2, 64, Contiguous(0, 400), 7);
    const std::vector<float> full = Run(all, bf16, 2);
    CHECK(Run(all, bf16, 1) == full);
    // Every third row and the last 20 (at least kBf16AttentionMinRows rows, so the same
    // products apply), as a compose's seams and suffix are a subset of a prefill's rows.
    AttentionProblem some = all;
    some.positions.clear();
    for (int64_t r = 0; r < 400; ++r) {
      if (r % 3 == 0 || r >= 380) some.positions.push_back(r);
    }
    REQUIRE(static_cast<int64_t>(some.positions.size()) >= kBf16AttentionMinRows);
    const int64_t row = all.shape.heads * all.shape.head_dim;
    some.q.clear();
    for (int64_t r : some.positions) {
      some.q.insert(some.q.end(), all.q.begin() + r * row, all.q.begin() + (r + 1) * row);
    }
    const std::vector<float> part = Run(some, bf16, 2);
    for (size_t i = 0; i < some.positions.size(); ++i) {
      const int64_t r = some.positions[i];
      CAPTURE(r);
      REQUIRE(std::memcmp(part.data() + static_cast<int64_t>(i) * row, full.data() + r * row,
                          static_cast<size_t>(row) * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("fewer rows than kBf16AttentionMinRows take the fp32 products") {
  const AttentionProblem c =
      MakeAttentionProblem(8, 2, 64, Contiguous(500, kBf16AttentionMinRows - 1), 9);
  CHECK(Run(c, true, 2) == Run(c, false, 2));
}

TEST_CASE("spans of bf16 or f16 entries give the bits of the same K/V widened to fp32") {
  // A compose's context: entry spans (K before RoPE) around a live block (K rotated already).
  AttentionProblem c = MakeAttentionProblem(8, 2, 64, Cases().back().positions, 9);
  const int64_t kw = c.shape.kv_heads * c.shape.head_dim;
  const auto keys = static_cast<int64_t>(c.k.size()) / kw;
  const KvRope rope{.rotary_dim = 16, .theta = 1e6};
  const int64_t live0 = 300, live1 = 420;  // [live0, live1): the live block
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    CAPTURE(DTypeName(dtype));
    // The entries' K/V in their dtype, and their exact fp32 widening.
    std::vector<uint16_t> k16(c.k.size()), v16(c.v.size());
    ConvertElements(DType::kF32, c.k.data(), dtype, k16.data(), k16.size());
    ConvertElements(DType::kF32, c.v.data(), dtype, v16.data(), v16.size());
    std::vector<float> k32(c.k.size()), v32(c.v.size());
    ConvertElements(dtype, k16.data(), DType::kF32, k32.data(), k32.size());
    ConvertElements(dtype, v16.data(), DType::kF32, v32.data(), v32.size());
    auto spans = [&](bool narrow) {
      auto entry = [&](int64_t p0, int64_t p1) {
        return narrow ? KvSpan{.pos0 = p0,
                               .n = p1 - p0,
                               .k = k16.data() + p0 * kw,
                               .v = v16.data() + p0 * kw,
                               .dtype = dtype,
                               .rope = true}
                      : KvSpan{.pos0 = p0,
                               .n = p1 - p0,
                               .k = k32.data() + p0 * kw,
                               .v = v32.data() + p0 * kw,
                               .rope = true};
      };
      return std::vector<KvSpan>{entry(0, live0),
                                 {.pos0 = live0,
                                  .n = live1 - live0,
                                  .k = c.k.data() + live0 * kw,
                                  .v = c.v.data() + live0 * kw},
                                 entry(live1, keys)};
    };
    for (bool bf16 : {true, false}) {
      CAPTURE(bf16);
      AttentionShape shape = c.shape;
      shape.bf16_products = bf16;
      cpu::ScopedComputeThreads budget(2);
      std::vector<float> want(c.q.size(), -1.0f), got(c.q.size(), -2.0f), contiguous;
      AlignedVector<uint32_t> pack;
      const auto wide = spans(false), narrow = spans(true);
      CausalAttention(shape, rope, c.q.data(), wide, want.data(), c.positions, &pack, &contiguous);
      CausalAttention(shape, rope, c.q.data(), narrow, got.data(), c.positions, &pack, &contiguous);
      CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
      CHECK(MaxAbs(got) > 0.01);
    }
  }
}

TEST_CASE("a rope span's K gives the bits of the same K rotated before the call") {
  // A compose's entry spans hold K before RoPE and are rotated as the kernel reads them; the
  // same rows rotated in place first (ApplyRope, as a full prefill's caches hold them) must
  // give the same output bits, whichever products and however many threads.
  const AttentionProblem c = MakeAttentionProblem(8, 2, 64, Cases().back().positions, 11);
  const int64_t kw = c.shape.kv_heads * c.shape.head_dim;
  const auto keys = static_cast<int64_t>(c.k.size()) / kw;
  const int64_t live0 = 260, live1 = 400;          // [live0, live1): a live block, already rotated
  for (const int64_t rotary_dim : {16, 24, 64}) {  // 24: the rotated dims end inside a vector
    CAPTURE(rotary_dim);
    const KvRope rope{.rotary_dim = rotary_dim, .theta = 1e6};
    std::vector<float> rotated = c.k;
    ApplyRope(rotated.data(), kw, live0, c.shape.kv_heads, c.shape.head_dim, rotary_dim, rope.theta,
              0);
    ApplyRope(rotated.data() + live1 * kw, kw, keys - live1, c.shape.kv_heads, c.shape.head_dim,
              rotary_dim, rope.theta, live1);
    auto spans = [&](const std::vector<float>& k, bool entry_rope) {
      auto span = [&](int64_t p0, int64_t p1, bool span_rope) {
        return KvSpan{.pos0 = p0,
                      .n = p1 - p0,
                      .k = k.data() + p0 * kw,
                      .v = c.v.data() + p0 * kw,
                      .rope = span_rope};
      };
      return std::vector<KvSpan>{span(0, live0, entry_rope), span(live0, live1, false),
                                 span(live1, keys, entry_rope)};
    };
    const auto read_rotated = spans(c.k, true), pre_rotated = spans(rotated, false);
    for (bool bf16 : {true, false}) {
      for (int threads : {1, 2}) {
        CAPTURE(bf16);
        CAPTURE(threads);
        AttentionShape shape = c.shape;
        shape.bf16_products = bf16;
        cpu::ScopedComputeThreads budget(threads);
        std::vector<float> want(c.q.size(), -1.0f), got(c.q.size(), -2.0f), contiguous;
        AlignedVector<uint32_t> pack;
        CausalAttention(shape, rope, c.q.data(), pre_rotated, want.data(), c.positions, &pack,
                        &contiguous);
        CausalAttention(shape, rope, c.q.data(), read_rotated, got.data(), c.positions, &pack,
                        &contiguous);
        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
        CHECK(MaxAbs(got) > 0.01);
      }
    }
  }
}

}  // namespace
}  // namespace hypic::model

// chunk_math.h on the CPU: the functions the CUDA chunked kernels call, checked one by one and
// assembled into a whole chunked forward (in the stages the device runs them) that must match
// the CPU ChunkedForward and the float64 reference, for the scalar-decay and no-decay variants.
#include "gpu/linear/chunk_math.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu/linear/linear_attention.h"
#include "tests/gpu/linear/linear_reference.h"
#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic::linear {
namespace {

using testing::MakeProblem;
using testing::Problem;
using testing::RelError;

constexpr double kTol = 1e-5;
constexpr Variant kChunkedVariants[] = {Variant::kLinear, Variant::kRetNet, Variant::kMamba2,
                                        Variant::kDeltaNet, Variant::kGdn};

struct Result {
  std::vector<float> o, final_state, zero_state, dense_t;
};

// A chunked forward built only from chunk_math.h. Per (head, chunk) the state-independent part
// (decay prefix, scores, WY solve of [U | W], Q_hat, K_hat), then the chain: V_new, O and the
// state step, the same step with U = 0 over the dk columns of T_C (delta family), and S(C|0)
// by difference when there is an initial state.
Result MathForward(const Problem& p, int chunk) {
  const Shape& sh = p.shape;
  const int H = sh.key_heads, HV = sh.value_heads, dk = sh.dk, dv = sh.dv, group = HV / H;
  const bool delta = HasBeta(p.variant), decay = HasGate(p.variant);
  const int64_t state_floats = int64_t{dk} * dv;
  Result res;
  res.o.assign(sh.tokens * HV * dv, 0.0f);
  res.final_state.assign(HV * state_floats, 0.0f);
  res.zero_state.assign(HV * state_floats, 0.0f);
  res.dense_t.assign(delta ? int64_t{HV} * dk * dk : 0, 0.0f);
  for (int h = 0; h < HV; ++h) {
    const int kh = h / group;
    std::vector<float> s(state_floats, 0.0f), t(delta ? int64_t{dk} * dk : 0, 0.0f);
    if (!p.initial.empty())
      s.assign(&p.initial[h * state_floats], &p.initial[(h + 1) * state_floats]);
    for (int d = 0; d < (delta ? dk : 0); ++d) t[int64_t{d} * dk + d] = 1.0f;
    double log_sum = 0.0;
    for (int64_t t0 = 0; t0 < sh.tokens; t0 += chunk) {
      const int L = static_cast<int>(std::min<int64_t>(chunk, sh.tokens - t0));
      auto q_row = [&](int r) { return &p.q[((t0 + r) * H + kh) * dk]; };
      auto k_row = [&](int r) { return &p.k[((t0 + r) * H + kh) * dk]; };
      auto v_at = [&](int r, int j) { return p.v[((t0 + r) * HV + h) * dv + j]; };
      auto beta = [&](int r) { return delta ? p.beta[(t0 + r) * HV + h] : 0.0f; };
      std::vector<double> b(L);
      if (decay) ChunkLogDecayPrefix(&p.g[t0 * HV + h], HV, L, b.data());
      const double* bp = decay ? b.data() : nullptr;
      if (decay) log_sum += b[L - 1];

      std::vector<float> a_qk(L * L), a_kk(L * L), u(L * dv), w(L * dk), q_hat(L * dk),
          k_hat(L * dk);
      for (int r = 0; r < L; ++r) {
        for (int c = 0; c < L; ++c) {
          a_qk[r * L + c] = QkScore(q_row(r), k_row(c), dk, bp, r, c);
          a_kk[r * L + c] = KkScore(k_row(r), k_row(c), dk, bp, beta(r), r, c);
        }
        for (int j = 0; j < dv; ++j) u[r * dv + j] = delta ? beta(r) * v_at(r, j) : v_at(r, j);
        for (int d = 0; d < dk; ++d) {
          w[r * dk + d] = beta(r) * ChunkDecay(bp, r, -1) * k_row(r)[d];
          q_hat[r * dk + d] = ChunkDecay(bp, r, -1) * q_row(r)[d];
          k_hat[r * dk + d] = ChunkDecay(bp, L - 1, r) * k_row(r)[d];
        }
      }
      if (delta) {
        for (int j = 0; j < dv; ++j) ForwardSubstituteColumn(a_kk.data(), L, L, &u[j], dv);
        for (int d = 0; d < dk; ++d) ForwardSubstituteColumn(a_kk.data(), L, L, &w[d], dk);
      }
      const float decay_end = ChunkDecay(bp, L - 1, -1);

      // x [dk, cols] over the chunk; u_src (row stride dv) nullptr means U = 0.
      auto step = [&](std::vector<float>& x, int cols, const float* u_src, float* o) {
        std::vector<float> v_new(L * cols);
        for (int r = 0; r < L; ++r) {
          for (int j = 0; j < cols; ++j) {
            const float uj = u_src != nullptr ? u_src[r * dv + j] : 0.0f;
            v_new[r * cols + j] = delta ? NewValue(uj, &w[r * dk], &x[j], cols, dk) : uj;
          }
        }
        for (int r = 0; o != nullptr && r < L; ++r) {
          for (int j = 0; j < cols; ++j) {
            o[((t0 + r) * HV + h) * dv + j] =
                ChunkOutput(&q_hat[r * dk], &x[j], cols, dk, &a_qk[r * L], &v_new[j], cols, r);
          }
        }
        for (int d = 0; d < dk; ++d) {
          for (int j = 0; j < cols; ++j) {
            float& e = x[int64_t{d} * cols + j];
            e = UpdatedState(e, decay_end, &k_hat[d], dk, &v_new[j], cols, L);
          }
        }
      };
      step(s, dv, u.data(), res.o.data());
      if (delta) step(t, dk, nullptr, nullptr);
    }
    std::copy(s.begin(), s.end(), &res.final_state[h * state_floats]);
    std::copy(t.begin(), t.end(), res.dense_t.begin() + int64_t{h} * dk * dk);
    float* z = &res.zero_state[h * state_floats];
    const auto factor = static_cast<float>(std::exp(log_sum));
    for (int d = 0; d < dk; ++d) {
      for (int j = 0; j < dv; ++j) {
        const int64_t i = int64_t{d} * dv + j;
        z[i] = p.initial.empty()
                   ? s[i]
                   : ZeroStateByDifference(s[i], delta ? &t[int64_t{d} * dk] : nullptr, factor,
                                           &p.initial[h * state_floats + j], dv, d, dk);
      }
    }
  }
  return res;
}

Result CpuChunked(const Problem& p, int chunk) {
  const TransitionForm form = TransitionFormOf(p.variant);
  const Shape& sh = p.shape;
  Result r;
  r.o.assign(sh.tokens * sh.value_heads * sh.dv, 0.0f);
  r.final_state.assign(p.state_floats(), 0.0f);
  r.zero_state.assign(p.state_floats(), 0.0f);
  std::vector<float> t(TransitionFloats(form, sh));
  REQUIRE_OK(
      ChunkedForward(p.variant, sh, p.inputs(), p.initial.empty() ? nullptr : p.initial.data(),
                     Outputs{r.o.data(), r.final_state.data(), r.zero_state.data(), t.data()},
                     ChunkOptions{chunk}));
  if (form == TransitionForm::kDense) r.dense_t = t;
  return r;
}

TEST_CASE("the chunk math assembled into a forward matches the CPU ChunkedForward") {
  uint64_t seed = 900;
  struct Dims {
    int dk, dv, chunk;
  };
  for (Variant variant : kChunkedVariants) {
    for (Dims dims : {Dims{64, 64, 64}, Dims{128, 128, 64}, Dims{64, 128, 64}, Dims{128, 64, 64},
                      Dims{32, 48, 32}}) {
      for (int64_t tokens : {1, 100, 200}) {  // one partial chunk, and full chunks plus a tail
        for (bool with_initial : {true, false}) {
          const Shape shape{tokens, 1, 2, dims.dk, dims.dv};
          const Problem p = MakeProblem(variant, shape, seed++, 0.05f, with_initial);
          const Result got = MathForward(p, dims.chunk);
          const Result want = CpuChunked(p, dims.chunk);
          INFO("variant=", std::string(VariantName(variant)), " dk=", dims.dk, " dv=", dims.dv,
               " T=", tokens, " initial=", with_initial);
          CHECK(RelError(got.o, want.o) <= kTol);
          CHECK(RelError(got.final_state, want.final_state) <= kTol);
          CHECK(RelError(got.zero_state, want.zero_state) <= kTol);
          CHECK(RelError(got.dense_t, want.dense_t) <= kTol);
        }
      }
    }
  }
}

TEST_CASE("the chunk math matches the float64 per-token reference, strong decays included") {
  uint64_t seed = 950;
  for (Variant variant : kChunkedVariants) {
    for (float max_decay : {0.05f, 8.0f}) {
      const Shape shape{150, 1, 2, 64, 64};
      const Problem p = MakeProblem(variant, shape, seed++, max_decay);
      const Result got = MathForward(p, 64);
      const testing::Reference ref = testing::ReferenceForward(p);
      INFO("variant=", std::string(VariantName(variant)), " max_decay=", max_decay);
      CHECK(RelError(got.o, ref.o) <= kTol);
      CHECK(RelError(got.final_state, ref.final_state) <= kTol);
      CHECK(RelError(got.zero_state, ref.zero_state) <= kTol);
      if (HasBeta(variant)) CHECK(RelError(got.dense_t, ref.transition) <= kTol);
    }
  }
}

TEST_CASE("ForwardSubstituteColumn solves the unit lower-triangular system in place") {
  hypic::testing::SeededRng rng(31);
  constexpr int n = 40, lda = 41, stride = 3;
  std::vector<float> a(n * lda), x(n * stride), rhs(n);
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < lda; ++c) a[r * lda + c] = c < r ? rng.Uniform(-0.2f, 0.2f) : 99.0f;
    rhs[r] = rng.Uniform(-1.0f, 1.0f);
    x[r * stride] = rhs[r];
  }
  ForwardSubstituteColumn(a.data(), lda, n, x.data(), stride);
  for (int r = 0; r < n; ++r) {  // (I + A) x = rhs; the 99s on and above the diagonal unread
    double lhs = x[r * stride];
    for (int c = 0; c < r; ++c) lhs += double{a[r * lda + c]} * x[c * stride];
    CHECK(lhs == doctest::Approx(rhs[r]).epsilon(1e-5));
  }
}

TEST_CASE("chunk decays only form e^{b_r - b_s} with r >= s") {
  // 64 tokens of log-decay -30: b reaches -1920, whose e^{-b} would overflow; the factors must
  // stay finite, e^0 on the diagonal and underflow to 0 far below it.
  std::vector<float> g(64, -30.0f);
  std::vector<double> b(64);
  ChunkLogDecayPrefix(g.data(), 1, 64, b.data());
  CHECK(b[63] == -1920.0);
  CHECK(ChunkDecay(b.data(), 10, 10) == 1.0f);
  CHECK(ChunkDecay(b.data(), 1, 0) == doctest::Approx(std::exp(-30.0)).epsilon(1e-6));
  CHECK(ChunkDecay(b.data(), 63, -1) == 0.0f);
  CHECK(ChunkDecay(nullptr, 63, -1) == 1.0f);
  const std::vector<float> q = {1.0f, 2.0f}, k = {3.0f, 4.0f};
  CHECK(QkScore(q.data(), k.data(), 2, nullptr, 3, 3) == 11.0f);
  CHECK(QkScore(q.data(), k.data(), 2, nullptr, 3, 4) == 0.0f);
  CHECK(KkScore(q.data(), k.data(), 2, nullptr, 0.5f, 3, 3) == 0.0f);
  CHECK(KkScore(q.data(), k.data(), 2, nullptr, 0.5f, 3, 2) == 5.5f);
}

}  // namespace
}  // namespace hypic::linear

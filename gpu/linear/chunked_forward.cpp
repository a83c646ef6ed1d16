// The chunked forward (MATH.md §2, "Chunked (WY / UT transform) form"). Per value head and
// chunk of L <= C tokens, with b_r the chunk-local cumulative log-decay (scalar or per row):
//   A_qk[r,s] = sum_d q_r[d] k_s[d] e^{b_r[d]-b_s[d]}            (s <= r)
//   A_kk[r,s] = beta_r sum_d k_r[d] k_s[d] e^{b_r[d]-b_s[d]}     (s < r)
//   delta family: (I + A_kk) [U | W] = [diag(beta) V | diag(beta) (e^b . K)]  (triangular solve)
//   plain family: U = V, W = 0
//   V_new = U - W S;  O = (e^b . Q) S + A_qk V_new;  S <- Diag(e^{b_L}) S + (e^{b_L-b} . K)^T V_new
// The same step, with U = 0 and dk columns, advances the dense transition T_C (the state map of
// the homogeneous recurrence), so T costs two L x dk x dk GEMMs per chunk instead of forming the
// chunk matrix M and a dk^3 product (StepTransition, fp32). Every exponent is e^{b_r - b_s}
// with r >= s (or e^{b_L - b_s}), so nothing overflows for strong decays.
//
// Two chains run per head: the one from the initial state (o, final_state) and, when T_C is
// wanted or S(C|0) must be separated from a non-zero initial state, the transition chain.
// S(C|0) is then S_out - T_C S_init (the composition identity read backwards): one dk x dk x dv
// product per head instead of a third chain from zero, which cost as much as the T chain.
//
// Threading: the heads are independent, so they split over the calling thread's compute
// budget (gpu/cpu/compute_threads.h); each head's products run on its own thread.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/aligned_vector.h"
#include "gpu/cpu/compute_threads.h"
#include "gpu/cpu/gemm.h"
#include "gpu/linear/linear_attention.h"
#include "gpu/linear/linear_internal.h"

namespace hypic::linear {

namespace {

using cpu::Trans;

// A chunk's products: those of a short chunk (a chunk's tail, a compose's seam steps: few rows,
// or a sum over few tokens) on GemmFewRows, where a library call costs more than the product
// itself; the rest on cpu::Gemm.
void ChunkGemm(Trans ta, Trans tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m < cpu::kGemmFewRows || k < cpu::kGemmFewRows) {
    return cpu::GemmFewRows(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  cpu::Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Subtracts rows [0, r) of X, weighted by A's row r, from columns [j0, j0 + N lanes of V) of
// row r, then the same for row r + 1 when `pair`, which also takes row r's result weighted by
// A[r + 1][r] last: each element's sum in the order of s, as one row at a time makes it. A pair
// loads each earlier row once for both rows and keeps 2 N vector accumulators in registers, so
// the sum over s is bound by neither one FMA chain's latency nor the loads. V is a GCC vector
// (or float for the last columns); `acc -= c * x` is one fused multiply-add where the CPU has it,
// as the scalar form compiles.
template <class V, int N, bool pair>
void SubtractEarlierRows(const float* a, int64_t lda, int r, int cols, int j0, float* x) {
  constexpr int kLanes = sizeof(V) / sizeof(float);
  const float* a0 = a + r * lda;
  const float* a1 = a0 + lda;
  float* x0 = x + int64_t{r} * cols + j0;
  float* x1 = x0 + cols;
  V acc0[N], acc1[N];
#pragma GCC unroll 4
  for (int i = 0; i < N; ++i) {
    std::memcpy(&acc0[i], x0 + i * kLanes, sizeof(V));
    if constexpr (pair) std::memcpy(&acc1[i], x1 + i * kLanes, sizeof(V));
  }
  for (int s = 0; s < r; ++s) {
    const float* xs = x + int64_t{s} * cols + j0;
    const float c0 = a0[s], c1 = pair ? a1[s] : 0.0f;
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) {
      V v;
      std::memcpy(&v, xs + i * kLanes, sizeof(V));
      acc0[i] -= c0 * v;
      if constexpr (pair) acc1[i] -= c1 * v;
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < N; ++i) std::memcpy(x0 + i * kLanes, &acc0[i], sizeof(V));
  if constexpr (pair) {
    const float c = a1[r];
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) {
      acc1[i] -= c * acc0[i];
      std::memcpy(x1 + i * kLanes, &acc1[i], sizeof(V));
    }
  }
}

// 16 fp32 lanes: one AVX-512 register, two AVX ones.
typedef float V16 __attribute__((vector_size(64)));
// Columns a panel of SolveUnitLower covers: two rows of it fill half the vector registers.
#if defined(__AVX512F__)
constexpr int kSolvePanels = 4;
#else
constexpr int kSolvePanels = 2;
#endif

// Rows r (and r + 1 when `pair`) of SolveUnitLower, panel by panel.
template <bool pair>
void SolveRows(const float* a, int64_t lda, int r, int cols, float* x) {
  int j0 = 0;
  for (; j0 + 16 * kSolvePanels <= cols; j0 += 16 * kSolvePanels) {
    SubtractEarlierRows<V16, kSolvePanels, pair>(a, lda, r, cols, j0, x);
  }
  for (; j0 + 16 <= cols; j0 += 16) SubtractEarlierRows<V16, 1, pair>(a, lda, r, cols, j0, x);
  for (; j0 < cols; ++j0) SubtractEarlierRows<float, 1, pair>(a, lda, r, cols, j0, x);
}

// x[s] <- x[s] e^{b_r} e^{-b_s} (ebr = e^{b_r}, einv[s] = e^{-b_s}); the second form first
// scales x[s] by beta in float, as A_kk's rows are. The scalar decay's factors in double, each x
// rounded back to float once. Separate, restrict-qualified loops so that they vectorise (the same
// operations in the same order as element by element: the bits do not change).
void ScaleByDecayFactors(float* __restrict x, int n, double ebr, const double* __restrict einv) {
  for (int s = 0; s < n; ++s) x[s] = static_cast<float>(x[s] * (ebr * einv[s]));
}
void ScaleByDecayFactors(float* __restrict x, int n, float beta, double ebr,
                         const double* __restrict einv) {
  for (int s = 0; s < n; ++s) x[s] = static_cast<float>(beta * x[s] * (ebr * einv[s]));
}

// One row of BuildKeyFactors for a per-row (scalar or no) decay: q <- eb q_in, k_hat <- eend k,
// and, when w is not nullptr, w <- beta eb k, each in double and rounded once.
void ScaleKeyRow(int dk, double eb, double eend, float beta, const float* __restrict q_in,
                 float* __restrict q, const float* __restrict k, float* __restrict k_hat,
                 float* __restrict w) {
  for (int d = 0; d < dk; ++d) {
    q[d] = static_cast<float>(q_in[d] * eb);
    k_hat[d] = static_cast<float>(k[d] * eend);
  }
  if (w == nullptr) return;
  const double beta_eb = beta * eb;
  for (int d = 0; d < dk; ++d) w[d] = static_cast<float>(beta_eb * k[d]);
}

// X <- (I + A)^{-1} X by forward substitution, for A strictly lower triangular [n, n] (row
// stride lda; the diagonal and upper part are not read) and X [n, cols], two rows at a time.
// Written out instead of a library trsm: at 64 x 64 one row at a time was already a little
// faster than OpenBLAS's single-threaded strsm (the BLAS then); in pairs of rows the solve's share
// of the GDN operator's profile fell from 13% to 6% (2026-12-07, docs/benchmarks-history.md).
void SolveUnitLower(const float* a, int64_t lda, int n, int cols, float* x) {
  int r = 1;
  for (; r + 1 < n; r += 2) SolveRows<true>(a, lda, r, cols, x);
  if (r < n) SolveRows<false>(a, lda, r, cols, x);
}

class ChunkKernel {
 public:
  ChunkKernel(Variant variant, const Shape& shape, int chunk)
      : kind_(DecayKindOf(variant)),
        delta_(HasBeta(variant)),
        dk_(shape.dk),
        dv_(shape.dv),
        t_block_(std::min(chunk, std::max(kMinTransitionBlock, shape.dk))) {
    const int64_t c = chunk, dk = dk_, dv = dv_;
    q_.resize(c * dk);
    k_hat_.resize(c * dk);
    w_.resize(delta_ ? c * dk : 0);
    u_.resize(c * dv);
    a_qk_.resize(c * c);
    a_kk_.resize(delta_ ? c * c : 0);
    beta_.resize(c);
    b_.resize(kind_ == DecayKind::kDiag ? c * dk : c);
    eb_.resize(b_.size());
    eend_.resize(b_.size());
    einv_.resize(kind_ == DecayKind::kScalar ? c : 0);
    decay_end_.resize(kind_ == DecayKind::kDiag ? dk : 1);
    vt_.resize(c * dk);
    y_.resize(delta_ ? c * (dv + dk) : 0);
    if (t_block_ < chunk) {
      w_block_.resize(int64_t{t_block_} * dk);
      k_block_.resize(int64_t{t_block_} * dk);
      decay_block_.resize(decay_end_.size());
    }
  }

  // Builds every state-independent quantity of chunk tokens [t0, t0 + len) of value head h /
  // key head kh. Q and K are read where they are (row stride ldqk_); V is copied into U (times
  // beta for the delta family), which the step then turns into V_new in place.
  void Prepare(const Shape& shape, const Inputs& in, int64_t t0, int len, int h, int kh) {
    len_ = len;
    const int dv = dv_, H = shape.key_heads, HV = shape.value_heads;
    ldqk_ = int64_t{H} * dk_;
    q_in_ = in.q + (t0 * H + kh) * dk_;
    k_in_ = in.k + (t0 * H + kh) * dk_;
    for (int r = 0; r < len; ++r) {
      const int64_t tok = t0 + r;
      const float* v = in.v + (tok * HV + h) * dv;
      float* u = &u_[int64_t{r} * dv];
      if (delta_) {
        const float beta = in.beta[tok * HV + h];
        beta_[r] = beta;
        for (int j = 0; j < dv; ++j) u[j] = v[j] * beta;
      } else {
        std::copy(v, v + dv, u);
      }
    }
    BuildCumulativeDecay(shape, in, t0, h);
    BuildScores();
    BuildKeyFactors();
    if (delta_) SolveWy();
  }

  // Row r of the chunk's Q and K inputs.
  const float* QIn(int r) const { return q_in_ + r * ldqk_; }
  const float* KIn(int r) const { return k_in_ + r * ldqk_; }

  // Advances one state chain over the chunk: S [dk, dv] in place. Writes O rows to `o` (row
  // stride ldo) when not nullptr. U becomes V_new in place (delta family): after Prepare, one
  // step reads it.
  void Step(float* s, float* o, int64_t ldo) {
    const int L = len_, dk = dk_, n = dv_;
    const float* v_new = u_.data();
    if (delta_) {
      ChunkGemm(Trans::kNo, Trans::kNo, L, n, dk, -1.0f, w_.data(), dk, s, n, 1.0f, u_.data(), n);
    }
    if (o != nullptr) {
      // q_ holds e^b . Q after Prepare.
      ChunkGemm(Trans::kNo, Trans::kNo, L, n, dk, 1.0f, q_.data(), dk, s, n, 0.0f, o, ldo);
      ChunkGemm(Trans::kNo, Trans::kNo, L, n, L, 1.0f, a_qk_.data(), L, v_new, n, 1.0f, o, ldo);
    }
    ScaleRows(decay_end_.data(), n, s);
    ChunkGemm(Trans::kYes, Trans::kNo, dk, n, L, 1.0f, k_hat_.data(), dk, v_new, n, 1.0f, s, n);
  }

  // True when StepWithTransition can advance both chains of this chunk at once: the delta
  // family, with the chunk no longer than a transition block (so T needs no block solves).
  bool CanFuseTransition() const { return delta_ && t_block_ >= len_; }

  // Step and StepTransition in one, on X = [S | T] [dk, dv + dk] (row stride dv + dk): T's
  // step is the state's with U = 0, so the products that read W and K_hat run once over both
  // chains, twice as wide (four products a chunk instead of six). REQUIRES:
  // CanFuseTransition().
  void StepWithTransition(float* x, float* o, int64_t ldo) {
    const int L = len_, dk = dk_, n = dv_, nx = dv_ + dk_;
    // Y = [U | 0] - W X: the state's V_new beside the transition's -W T.
    for (int r = 0; r < L; ++r) {
      float* yr = y_.data() + int64_t{r} * nx;
      std::memcpy(yr, u_.data() + int64_t{r} * n, n * sizeof(float));
      std::fill(yr + n, yr + nx, 0.0f);
    }
    ChunkGemm(Trans::kNo, Trans::kNo, L, nx, dk, -1.0f, w_.data(), dk, x, nx, 1.0f, y_.data(), nx);
    if (o != nullptr) {
      ChunkGemm(Trans::kNo, Trans::kNo, L, n, dk, 1.0f, q_.data(), dk, x, nx, 0.0f, o, ldo);
      ChunkGemm(Trans::kNo, Trans::kNo, L, n, L, 1.0f, a_qk_.data(), L, y_.data(), nx, 1.0f, o,
                ldo);
    }
    ScaleRows(decay_end_.data(), nx, x);
    ChunkGemm(Trans::kYes, Trans::kNo, dk, nx, L, 1.0f, k_hat_.data(), dk, y_.data(), nx, 1.0f, x,
              nx);
  }

  // Advances the dense transition chain T [dk, dk] (delta family) in fp32: T <- D T - K_hat^T
  // (W T), the state step with U = 0. A chunk holding more than dk keys has linearly dependent
  // keys, so I + A_kk grows ill-conditioned and the fp32 W loses digits that T keeps (the state
  // does not: every chunk refreshes it with new inputs). Such chunks advance T in blocks of
  // t_block_ = dk tokens, each with its own small WY solve on the diagonal block of A_kk: the
  // same product of per-token factors, split where the solve stays accurate. Measured against
  // the float64 reference (dk 8-64, 63-1000 tokens): <= 6e-6 relative with blocks, up to 5e-5
  // with 64-token solves at dk = 8 (tests/gpu/linear). In double the chain cost as much as the
  // whole forward; in fp32 it costs about a fifth of it (docs/benchmarks.md).
  void StepTransition(float* t) {
    const int L = len_;
    if (t_block_ >= L) {
      AdvanceTransition(w_.data(), k_hat_.data(), decay_end_.data(), L, t);
      return;
    }
    for (int r0 = 0; r0 < L; r0 += t_block_) {
      const int r1 = std::min(L, r0 + t_block_);
      BuildTransitionBlock(r0, r1);
      AdvanceTransition(w_block_.data(), k_block_.data(), decay_block_.data(), r1 - r0, t);
    }
  }

 private:
  // Smaller blocks would cost more in BLAS calls than they gain in accuracy.
  static constexpr int kMinTransitionBlock = 8;
  // e^600 and e^-600 are well inside double's range (about e^+-709).
  static constexpr double kMaxFactoredLogDecay = 600.0;

  // Element (r, d) of a per-chunk decay factor array (1 without decay).
  double Factor(const std::vector<double>& f, int r, int d) const {
    if (kind_ == DecayKind::kScalar) return f[r];
    if (kind_ == DecayKind::kDiag) return f[int64_t{r} * dk_ + d];
    return 1.0;
  }

  // The cumulative log-decay b of row r, element d (0 without decay; 0 for r = -1).
  double LogDecay(int r, int d) const {
    if (r < 0 || kind_ == DecayKind::kNone) return 0.0;
    return kind_ == DecayKind::kScalar ? b_[r] : b_[int64_t{r} * dk_ + d];
  }

  // x [dk, cols] <- Diag(decay) x: decay[0] for all rows when scalar, nothing without decay.
  void ScaleRows(const float* decay, int cols, float* x) const {
    if (kind_ == DecayKind::kNone) return;
    for (int d = 0; d < dk_; ++d) {
      const float a = decay[kind_ == DecayKind::kDiag ? d : 0];
      for (int j = 0; j < cols; ++j) x[int64_t{d} * cols + j] *= a;
    }
  }

  // T <- Diag(decay) T - kh^T (w T) over `rows` tokens.
  void AdvanceTransition(const float* w, const float* kh, const float* decay, int rows, float* t) {
    const int dk = dk_;
    ChunkGemm(Trans::kNo, Trans::kNo, rows, dk, dk, -1.0f, w, dk, t, dk, 0.0f, vt_.data(), dk);
    ScaleRows(decay, dk, t);
    ChunkGemm(Trans::kYes, Trans::kNo, dk, dk, rows, 1.0f, kh, dk, vt_.data(), dk, 1.0f, t, dk);
  }

  // The WY factors of chunk rows [r0, r1) taken alone: decays relative to the block's start,
  // W solved against the diagonal block of A_kk (its decays are already relative).
  void BuildTransitionBlock(int r0, int r1) {
    const int dk = dk_, n = r1 - r0;
    for (int d = 0; d < (kind_ == DecayKind::kDiag ? dk : 1); ++d) {
      decay_block_[d] = static_cast<float>(std::exp(LogDecay(r1 - 1, d) - LogDecay(r0 - 1, d)));
    }
    for (int r = r0; r < r1; ++r) {
      for (int d = 0; d < dk; ++d) {
        const int64_t i = int64_t{r - r0} * dk + d;
        const double kv = KIn(r)[d];
        w_block_[i] =
            static_cast<float>(beta_[r] * std::exp(LogDecay(r, d) - LogDecay(r0 - 1, d)) * kv);
        k_block_[i] = static_cast<float>(std::exp(LogDecay(r1 - 1, d) - LogDecay(r, d)) * kv);
      }
    }
    SolveUnitLower(a_kk_.data() + int64_t{r0} * len_ + r0, len_, n, dk, w_block_.data());
  }

  void BuildCumulativeDecay(const Shape& shape, const Inputs& in, int64_t t0, int h) {
    const int L = len_, dk = dk_, HV = shape.value_heads;
    if (kind_ == DecayKind::kScalar) {
      double acc = 0.0;
      for (int r = 0; r < L; ++r) {
        acc += in.g[(t0 + r) * HV + h];
        b_[r] = acc;
      }
      decay_end_[0] = static_cast<float>(std::exp(b_[L - 1]));
      factored_ = true;
      for (int r = 0; r < L; ++r) {
        eb_[r] = std::exp(b_[r]);
        einv_[r] = std::exp(-b_[r]);
        eend_[r] = std::exp(b_[L - 1] - b_[r]);
        factored_ = factored_ && std::abs(b_[r]) <= kMaxFactoredLogDecay;
      }
    } else if (kind_ == DecayKind::kDiag) {
      for (int d = 0; d < dk; ++d) {
        double acc = 0.0;
        for (int r = 0; r < L; ++r) {
          acc += in.g[((t0 + r) * HV + h) * dk + d];
          b_[int64_t{r} * dk + d] = acc;
        }
        decay_end_[d] = static_cast<float>(std::exp(b_[int64_t{L - 1} * dk + d]));
        for (int r = 0; r < L; ++r) {
          const int64_t i = int64_t{r} * dk + d;
          eb_[i] = std::exp(b_[i]);
          eend_[i] = std::exp(b_[int64_t{L - 1} * dk + d] - b_[i]);
        }
      }
    }
  }

  // Pairwise decayed scores: A_qk (inclusive lower) and A_kk (strict lower, times beta_r).
  void BuildScores() {
    const int L = len_, dk = dk_;
    if (kind_ != DecayKind::kDiag) {
      ChunkGemm(Trans::kNo, Trans::kYes, L, L, dk, 1.0f, q_in_, ldqk_, k_in_, ldqk_, 0.0f,
                a_qk_.data(), L);
      if (delta_) {
        ChunkGemm(Trans::kNo, Trans::kYes, L, L, dk, 1.0f, k_in_, ldqk_, k_in_, ldqk_, 0.0f,
                  a_kk_.data(), L);
      }
      // The scalar decay's factor e^{b_r - b_s} as e^{b_r} e^{-b_s}: two exps per row rather
      // than one per pair, in double, whose product is within a few double ulps of the exp of
      // the difference (far below the fp32 score's rounding). Only while every |b| is at most
      // kMaxFactoredLogDecay, so that neither factor overflows or underflows; a chunk that
      // decays further takes the exp of each difference.
      const bool scalar = kind_ == DecayKind::kScalar;
      for (int r = 0; r < L; ++r) {
        float* qk = &a_qk_[int64_t{r} * L];
        float* kk = delta_ ? &a_kk_[int64_t{r} * L] : nullptr;
        const float beta = delta_ ? beta_[r] : 0.0f;
        if (scalar && factored_) {
          ScaleByDecayFactors(qk, r + 1, eb_[r], einv_.data());
          if (delta_) ScaleByDecayFactors(kk, r, beta, eb_[r], einv_.data());
        } else {
          for (int s = 0; s <= r; ++s) {
            const double f = scalar ? std::exp(b_[r] - b_[s]) : 1.0;
            qk[s] = static_cast<float>(qk[s] * f);
            if (delta_ && s < r) kk[s] = static_cast<float>(beta * kk[s] * f);
          }
        }
        for (int s = r + 1; s < L; ++s) qk[s] = 0.0f;
        if (delta_) {
          for (int s = r; s < L; ++s) kk[s] = 0.0f;
        }
      }
      return;
    }
    // The diagonal decay does not factor out of the dot products: one exp per (r, s, d), in
    // double.
    for (int r = 0; r < L; ++r) {
      const double* br = &b_[int64_t{r} * dk];
      const float* qr = QIn(r);
      const float* kr = KIn(r);
      for (int s = 0; s < L; ++s) {
        const int64_t i = int64_t{r} * L + s;
        if (s > r) {
          a_qk_[i] = 0.0f;
          if (delta_) a_kk_[i] = 0.0f;
          continue;
        }
        const double* bs = &b_[int64_t{s} * dk];
        const float* ks = KIn(s);
        double aq = 0.0, ak = 0.0;
        for (int d = 0; d < dk; ++d) {
          const double w = ks[d] * std::exp(br[d] - bs[d]);
          aq += qr[d] * w;
          ak += kr[d] * w;
        }
        a_qk_[i] = static_cast<float>(aq);
        if (delta_) a_kk_[i] = s < r ? static_cast<float>(beta_[r] * ak) : 0.0f;
      }
    }
  }

  // q_ <- e^b . Q, k_hat_ <- e^{b_L - b} . K, and (delta) w_ <- beta e^b . K before the solve.
  void BuildKeyFactors() {
    const int L = len_, dk = dk_;
    if (kind_ != DecayKind::kDiag) {  // one factor per row (1 without decay)
      for (int r = 0; r < L; ++r) {
        const int64_t at = int64_t{r} * dk;
        ScaleKeyRow(dk, Factor(eb_, r, 0), Factor(eend_, r, 0), delta_ ? beta_[r] : 0.0f, QIn(r),
                    &q_[at], KIn(r), &k_hat_[at], delta_ ? &w_[at] : nullptr);
      }
      return;
    }
    for (int r = 0; r < L; ++r) {
      for (int d = 0; d < dk; ++d) {
        const int64_t i = int64_t{r} * dk + d;
        const double eb = Factor(eb_, r, d), eend = Factor(eend_, r, d);
        const float k = KIn(r)[d];
        q_[i] = static_cast<float>(QIn(r)[d] * eb);
        k_hat_[i] = static_cast<float>(k * eend);
        if (delta_) w_[i] = static_cast<float>(beta_[r] * eb * k);
      }
    }
  }

  // (I + A_kk) X = B for X in {U, W}: A_kk is strictly lower, the diagonal is the implied 1.
  void SolveWy() {
    const int L = len_;
    SolveUnitLower(a_kk_.data(), L, L, dv_, u_.data());
    SolveUnitLower(a_kk_.data(), L, L, dk_, w_.data());
  }

  DecayKind kind_;
  bool delta_;
  int dk_, dv_;
  int t_block_;  // tokens per WY solve of the transition chain (StepTransition)
  int len_ = 0;
  // The chunk's Q and K inputs, rows ldqk_ apart (Prepare).
  const float* q_in_ = nullptr;
  const float* k_in_ = nullptr;
  int64_t ldqk_ = 0;
  AlignedVector<float> q_, k_hat_, w_, u_, a_qk_, a_kk_;
  std::vector<float> beta_, decay_end_;
  // Chunk-local cumulative log-decay b, kept in double (its rounding would enter every
  // exponent), and the factors e^b and e^{b_L - b}: [L] for a scalar decay, [L, dk] diagonal.
  std::vector<double> b_, eb_, eend_;
  std::vector<double> einv_;  // scalar decay: e^{-b}
  bool factored_ = false;     // scalar decay: every |b| <= kMaxFactoredLogDecay
  // The transition chain's W T, and its per-block factors when t_block_ < the chunk.
  AlignedVector<float> vt_, w_block_, k_block_;
  std::vector<float> decay_block_;
  AlignedVector<float> y_;  // StepWithTransition's [U | 0] - W [S | T]
};

// z [dk, dv] -= T S_init for one head: `dense` T [dk, dk] when not nullptr, else the diagonal
// e^{log_sum} (scalar decay) or e^{log_sum_diag} (diagonal decay), or I without decay.
void SubtractTransitionTimesState(const float* dense, DecayKind kind, double log_sum,
                                  const double* log_sum_diag, const float* init, int dk, int dv,
                                  float* z) {
  if (dense != nullptr) {
    ChunkGemm(Trans::kNo, Trans::kNo, dk, dv, dk, -1.0f, dense, dk, init, dv, 1.0f, z, dv);
    return;
  }
  for (int d = 0; d < dk; ++d) {
    const double log_a = kind == DecayKind::kDiag ? log_sum_diag[d] : log_sum;
    const auto a = static_cast<float>(std::exp(log_a));
    for (int j = 0; j < dv; ++j) z[int64_t{d} * dv + j] -= a * init[int64_t{d} * dv + j];
  }
}

// How many threads split the heads: the calling thread's compute budget, at most one per
// head, and 1 for short inputs, where a thread's hand-off costs about as much as a head's
// chunk. Each head thread runs its products on itself (ParallelFor gives its ranges a budget
// of 1).
int ChunkThreads(const Shape& shape, int chunk) {
  if (shape.tokens < 2 * int64_t{chunk}) return 1;
  return std::clamp(cpu::ComputeThreads(), 1, int{shape.value_heads});
}

Status CheckChunk(int chunk) {
  if (chunk != 16 && chunk != 32 && chunk != 64) {
    return BadRequest("chunk_size must be 16, 32 or 64, got " + std::to_string(chunk));
  }
  return Status::Ok();
}

// ChunkedForward's work for value heads [h0, h1), with its own kernel and buffers, its
// products on the calling thread: they are too small to thread, and on one thread their bits
// do not depend on the budget or on how heads are split. The heads advance chunk by chunk
// together, so a chunk's rows of q, k and v (head after head, key heads shared by value heads
// read once) come from memory once and in whole runs of the row, where one head's pass over
// every token at a time read q and k twice and in 256-byte pieces: the copy in of Prepare was
// the operator's largest cost after its products (the inputs of a 16k-token prompt are 67 MB
// a layer). Each head's operations, and so its bits, are those of one head at a time.
// Arguments checked by the caller.
void RunHeads(Variant variant, const Shape& shape, const Inputs& in, const float* initial_state,
              const Outputs& out, int chunk, int h0, int h1) {
  const int dk = shape.dk, dv = shape.dv, HV = shape.value_heads;
  const int group = HV / shape.key_heads;
  const TransitionForm form = TransitionFormOf(variant);
  const DecayKind kind = DecayKindOf(variant);
  const int64_t state_floats = int64_t{dk} * dv, t_floats = int64_t{dk} * dk;
  // The chain starts from the initial state only when an output needs it; S(C|0) alone is
  // then the chain from zero. Otherwise S(C|0) = S_out - T_C S_init, which needs T_C.
  const float* init = out.o != nullptr || out.final_state != nullptr ? initial_state : nullptr;
  const bool zero_by_difference = out.zero_state != nullptr && init != nullptr;
  const bool dense = form == TransitionForm::kDense;
  const bool dense_t = dense && (out.transition != nullptr || zero_by_difference);
  const bool log_t = !dense && (out.transition != nullptr || zero_by_difference);
  const bool main_chain =
      out.o != nullptr || out.final_state != nullptr || out.zero_state != nullptr;
  const int heads = h1 - h0;

  cpu::ScopedComputeThreads one(1);
  ChunkKernel kernel(variant, shape, chunk);
  // One head's chains: `state` (outputs into `o` when not nullptr) and/or `t`. Both at once run
  // on x = [S | T]: copied in before the first chunk that can fuse them and out after the last
  // (a chunk that cannot runs them apart on state and t).
  const int64_t nx = int64_t{dv} + dk;
  struct Chains {
    int h = 0;
    float* state = nullptr;
    float* o = nullptr;
    float* t = nullptr;
    float* x = nullptr;
    bool in_x = false;
  };
  auto to_x = [&](Chains& c) {
    for (int d = 0; d < dk; ++d) {
      std::memcpy(c.x + d * nx, c.state + int64_t{d} * dv, dv * sizeof(float));
      std::memcpy(c.x + d * nx + dv, c.t + int64_t{d} * dk, dk * sizeof(float));
    }
  };
  auto from_x = [&](Chains& c) {
    for (int d = 0; d < dk; ++d) {
      std::memcpy(c.state + int64_t{d} * dv, c.x + d * nx, dv * sizeof(float));
      std::memcpy(c.t + int64_t{d} * dk, c.x + d * nx + dv, dk * sizeof(float));
    }
  };
  // Advances every head of `chains` over all tokens, chunk by chunk.
  auto advance = [&](std::span<Chains> chains) {
    for (int64_t t0 = 0; t0 < shape.tokens; t0 += chunk) {
      const int len = static_cast<int>(std::min<int64_t>(chunk, shape.tokens - t0));
      for (Chains& c : chains) {
        kernel.Prepare(shape, in, t0, len, c.h, c.h / group);
        float* o_rows = c.o != nullptr ? c.o + t0 * HV * dv : nullptr;
        const bool fuse = c.state != nullptr && c.t != nullptr && kernel.CanFuseTransition();
        if (fuse != c.in_x) {
          if (fuse) {
            to_x(c);
          } else {
            from_x(c);
          }
          c.in_x = fuse;
        }
        if (fuse) {
          kernel.StepWithTransition(c.x, o_rows, int64_t{HV} * dv);
          continue;
        }
        if (c.state != nullptr) kernel.Step(c.state, o_rows, int64_t{HV} * dv);
        if (c.t != nullptr) kernel.StepTransition(c.t);
      }
    }
    for (Chains& c : chains) {
      if (c.in_x) from_x(c);
      c.in_x = false;
    }
  };

  // Every head's state (from its initial state or zero) and transition (from I). The state
  // chains run in final_state itself where nothing else needs the state they start from (no
  // S(C|0) to separate): a compose's 8-token seam steps update the running state in place, with
  // no copy in and out per step. Elsewhere in `s`. Buffers are written before read (no zeroing
  // pass), on cache lines as the kernel's own.
  const bool in_place = out.final_state != nullptr && out.zero_state == nullptr;
  UninitializedVector<float> s(in_place ? 0 : heads * state_floats);
  UninitializedVector<float> t(dense_t ? heads * t_floats : 0);
  UninitializedVector<float> x(dense_t && main_chain ? heads * dk * nx : 0);
  const auto state_of = [&](int j) {  // head h0 + j's state chain
    return in_place ? out.final_state + (h0 + j) * state_floats : s.data() + j * state_floats;
  };
  std::vector<Chains> chains;
  for (int j = 0; j < heads; ++j) {
    const int h = h0 + j;
    float* sj = state_of(j);
    const float* init_h = init != nullptr ? init + h * state_floats : nullptr;
    if (init_h == nullptr) {
      std::fill(sj, sj + state_floats, 0.0f);
    } else if (init_h != sj) {  // an in-place update starts where it is
      std::memcpy(sj, init_h, state_floats * sizeof(float));
    }
    float* tj = dense_t ? t.data() + j * t_floats : nullptr;
    if (dense_t) {
      std::fill(tj, tj + t_floats, 0.0f);
      for (int d = 0; d < dk; ++d) tj[int64_t{d} * dk + d] = 1.0f;
    }
    chains.push_back({.h = h,
                      .state = main_chain ? sj : nullptr,
                      .o = out.o != nullptr ? out.o + h * dv : nullptr,
                      .t = tj,
                      .x = x.empty() ? nullptr : x.data() + j * dk * nx,
                      .in_x = false});
  }
  if (main_chain || dense_t) advance(chains);

  std::vector<double> log_sum_diag(kind == DecayKind::kDiag ? dk : 0);
  for (int j = 0; j < heads; ++j) {
    const int h = h0 + j;
    const float* sj = state_of(j);
    const float* tj = dense_t ? t.data() + j * t_floats : nullptr;
    const float* init_h = init != nullptr ? init + h * state_floats : nullptr;
    // The log forms are exact sums of g; no chain needed.
    double log_sum = 0.0;
    std::fill(log_sum_diag.begin(), log_sum_diag.end(), 0.0);
    for (int64_t tok = 0; tok < (log_t ? shape.tokens : 0); ++tok) {
      if (kind == DecayKind::kScalar) {
        log_sum += in.g[tok * HV + h];
      } else if (kind == DecayKind::kDiag) {
        for (int d = 0; d < dk; ++d) log_sum_diag[d] += in.g[(tok * HV + h) * dk + d];
      }
    }
    // Before final_state, which may alias the initial state.
    if (out.zero_state != nullptr) {
      float* z = out.zero_state + h * state_floats;
      std::memcpy(z, sj, state_floats * sizeof(float));
      if (zero_by_difference) {
        SubtractTransitionTimesState(tj, kind, log_sum, log_sum_diag.data(), init_h, dk, dv, z);
        // The difference cancels T S_init against S_out, so its error is about eps |T S_init|
        // (plus T's own relative error times |T S_init|) against |S(C|0)|. Where T S_init
        // outweighs S(C|0) the head runs the chain from zero instead; in a segment prefill T
        // has long decayed the seam's state, so this is rare there.
        double cancelled = 0.0, kept = 0.0;
        for (int64_t i = 0; i < state_floats; ++i) {
          const double d = double{sj[i]} - z[i];
          cancelled += d * d;
          kept += double{z[i]} * z[i];
        }
        if (cancelled > kept) {
          std::fill(z, z + state_floats, 0.0f);
          Chains from_zero{
              .h = h, .state = z, .o = nullptr, .t = nullptr, .x = nullptr, .in_x = false};
          advance(std::span<Chains>(&from_zero, 1));
        }
      }
    }
    if (out.final_state != nullptr && !in_place) {
      std::memcpy(out.final_state + h * state_floats, sj, state_floats * sizeof(float));
    }
    if (out.transition != nullptr)
      WriteTransition(form, shape, h, tj, log_sum, log_sum_diag.data(), out.transition);
  }
}

}  // namespace

Status ChunkedForward(Variant variant, const Shape& shape, const Inputs& in,
                      const float* initial_state, const Outputs& out, const ChunkOptions& options) {
  HYPIC_RETURN_IF_ERROR(Validate(variant, shape, in));
  HYPIC_RETURN_IF_ERROR(CheckChunk(options.chunk_size));
  const int HV = shape.value_heads, threads = ChunkThreads(shape, options.chunk_size);
  cpu::ParallelFor(HV, (HV + threads - 1) / threads, [&](int64_t h0, int64_t h1) {
    RunHeads(variant, shape, in, initial_state, out, options.chunk_size, static_cast<int>(h0),
             static_cast<int>(h1));
  });
  return Status::Ok();
}

Status ChunkedForwardHeads(Variant variant, const Shape& shape, const Inputs& in,
                           const float* initial_state, const Outputs& out, int h0, int h1,
                           const ChunkOptions& options) {
  HYPIC_RETURN_IF_ERROR(Validate(variant, shape, in));
  HYPIC_RETURN_IF_ERROR(CheckChunk(options.chunk_size));
  if (h0 < 0 || h1 > shape.value_heads || h0 > h1) {
    return BadRequest("heads [" + std::to_string(h0) + ", " + std::to_string(h1) + ") of " +
                      std::to_string(shape.value_heads));
  }
  RunHeads(variant, shape, in, initial_state, out, options.chunk_size, h0, h1);
  return Status::Ok();
}

}  // namespace hypic::linear

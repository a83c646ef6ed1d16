// The chunked forward (MATH.md §2, "Chunked (WY / UT transform) form"). Per value head and
// chunk of L <= C tokens, with b_r the chunk-local cumulative log-decay (scalar or per row):
//   A_qk[r,s] = sum_d q_r[d] k_s[d] e^{b_r[d]-b_s[d]}            (s <= r)
//   A_kk[r,s] = beta_r sum_d k_r[d] k_s[d] e^{b_r[d]-b_s[d]}     (s < r)
//   delta family: (I + A_kk) [U | W] = [diag(beta) V | diag(beta) (e^b . K)]  (triangular solve)
//   plain family: U = V, W = 0
//   V_new = U - W S;  O = (e^b . Q) S + A_qk V_new;  S <- Diag(e^{b_L}) S + (e^{b_L-b} . K)^T V_new
// The same step, with U = 0 and dk columns, advances the dense transition T_C (the state map of
// the homogeneous recurrence), so T costs two L x dk x dk GEMMs per chunk instead of forming the
// chunk matrix M and a dk^3 product; that chain (and the W feeding it) runs in double, see
// StepTransition. Every exponent is e^{b_r - b_s} with r >= s (or
// e^{b_L - b_s}), so nothing overflows for strong decays.
//
// Three chains may run per head: the one from the initial state (o, final_state), the one from
// zero (S(C|0), only when an initial state is given) and the transition chain (delta family).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/linear/linear_attention.h"
#include "gpu/linear/linear_internal.h"

namespace hypic::linear {

namespace {

class ChunkKernel {
 public:
  ChunkKernel(Variant variant, const Shape& shape, int chunk)
      : kind_(DecayKindOf(variant)), delta_(HasBeta(variant)), dk_(shape.dk), dv_(shape.dv) {
    const int64_t c = chunk, dk = dk_, dv = dv_;
    q_.resize(c * dk);
    k_.resize(c * dk);
    k_hat_.resize(c * dk);
    w_.resize(delta_ ? c * dk : 0);
    u_.resize(c * dv);
    a_qk_.resize(c * c);
    a_kk_.resize(delta_ ? c * c : 0);
    v_new_.resize(delta_ ? c * dv : 0);
    beta_.resize(c);
    b_.resize(kind_ == DecayKind::kDiag ? c * dk : c);
    eb_.resize(b_.size());
    eend_.resize(b_.size());
    decay_end_.resize(kind_ == DecayKind::kDiag ? dk : 1);
  }

  // Loads chunk tokens [t0, t0 + len) of value head h / key head kh and builds every
  // state-independent quantity.
  void Prepare(const Shape& shape, const Inputs& in, int64_t t0, int len, int h, int kh) {
    len_ = len;
    const int dk = dk_, dv = dv_, H = shape.key_heads, HV = shape.value_heads;
    for (int r = 0; r < len; ++r) {
      const int64_t tok = t0 + r;
      std::memcpy(&q_[int64_t{r} * dk], in.q + (tok * H + kh) * dk, dk * sizeof(float));
      std::memcpy(&k_[int64_t{r} * dk], in.k + (tok * H + kh) * dk, dk * sizeof(float));
      std::memcpy(&u_[int64_t{r} * dv], in.v + (tok * HV + h) * dv, dv * sizeof(float));
      if (delta_) beta_[r] = in.beta[tok * HV + h];
    }
    BuildCumulativeDecay(shape, in, t0, h);
    BuildScores();
    BuildKeyFactors();
    if (delta_) SolveWy();
  }

  // Advances one state chain over the chunk: S [dk, dv] in place. Writes O rows to `o` (row
  // stride ldo) when not nullptr.
  void Step(float* s, float* o, int64_t ldo) {
    const int L = len_, dk = dk_, n = dv_;
    const float* v_new = u_.data();
    if (delta_) {
      std::memcpy(v_new_.data(), u_.data(), int64_t{L} * n * sizeof(float));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, n, dk, -1.0f, w_.data(), dk, s, n,
                  1.0f, v_new_.data(), n);
      v_new = v_new_.data();
    }
    if (o != nullptr) {
      // q_ holds e^b . Q after Prepare.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, n, dk, 1.0f, q_.data(), dk, s, n,
                  0.0f, o, ldo);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, n, L, 1.0f, a_qk_.data(), L, v_new,
                  n, 1.0f, o, ldo);
    }
    if (kind_ == DecayKind::kScalar) {
      const float a = decay_end_[0];
      for (int64_t i = 0; i < int64_t{dk} * n; ++i) s[i] *= a;
    } else if (kind_ == DecayKind::kDiag) {
      for (int d = 0; d < dk; ++d) {
        const float a = decay_end_[d];
        for (int j = 0; j < n; ++j) s[int64_t{d} * n + j] *= a;
      }
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dk, n, L, 1.0f, k_hat_.data(), dk, v_new,
                n, 1.0f, s, n);
  }

  // Advances the dense transition chain T [dk, dk] (delta family): T <- D T - K_hat^T (W T).
  // The whole T path (A_kk, the WY solve for W, the chain) runs in double: T is a product of
  // many near-singular contractions, and fp32 rounding of each chunk's factor would otherwise
  // dominate its relative error over long segments (measured: up to 1.1e-5 in fp32, 3e-8 here;
  // docs/benchmarks.md). It roughly doubles the cost of the forward for GDN.
  void StepTransition(double* t) {
    const int L = len_, dk = dk_;
    const int64_t n = int64_t{L} * dk;
    wd_.resize(n);
    khd_.resize(n);
    vtd_.resize(n);
    for (int r = 0; r < L; ++r) {
      for (int d = 0; d < dk; ++d) {
        const int64_t i = int64_t{r} * dk + d;
        vtd_[i] = k_[i];  // raw K in double for the scores below (scalar / no decay)
        const double eb = Factor(eb_, r, d), eend = Factor(eend_, r, d);
        wd_[i] = beta_[r] * eb * k_[i];
        khd_[i] = k_[i] * eend;
      }
    }
    if (kind_ != DecayKind::kDiag) {  // the diagonal case built akk_d_ in BuildScores
      akk_d_.resize(int64_t{L} * L);
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, dk, 1.0, vtd_.data(), dk,
                  vtd_.data(), dk, 0.0, akk_d_.data(), L);
      for (int r = 0; r < L; ++r) {
        for (int c = 0; c < L; ++c) {
          const double f = kind_ == DecayKind::kScalar ? std::exp(b_[r] - b_[c]) : 1.0;
          double& a = akk_d_[int64_t{r} * L + c];
          a = c < r ? beta_[r] * a * f : 0.0;
        }
      }
    }
    cblas_dtrsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, L, dk, 1.0,
                akk_d_.data(), L, wd_.data(), dk);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, dk, dk, -1.0, wd_.data(), dk, t, dk,
                0.0, vtd_.data(), dk);
    for (int d = 0; d < dk; ++d) {
      double a = 1.0;
      if (kind_ == DecayKind::kScalar) a = std::exp(b_[L - 1]);
      if (kind_ == DecayKind::kDiag) a = std::exp(b_[int64_t{L - 1} * dk + d]);
      for (int j = 0; j < dk; ++j) t[int64_t{d} * dk + j] *= a;
    }
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dk, dk, L, 1.0, khd_.data(), dk,
                vtd_.data(), dk, 1.0, t, dk);
  }

 private:
  // Element (r, d) of a per-chunk decay factor array (1 without decay).
  double Factor(const std::vector<double>& f, int r, int d) const {
    if (kind_ == DecayKind::kScalar) return f[r];
    if (kind_ == DecayKind::kDiag) return f[int64_t{r} * dk_ + d];
    return 1.0;
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
      for (int r = 0; r < L; ++r) {
        eb_[r] = std::exp(b_[r]);
        eend_[r] = std::exp(b_[L - 1] - b_[r]);
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
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, dk, 1.0f, q_.data(), dk, k_.data(),
                  dk, 0.0f, a_qk_.data(), L);
      if (delta_) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, dk, 1.0f, k_.data(), dk,
                    k_.data(), dk, 0.0f, a_kk_.data(), L);
      }
      for (int r = 0; r < L; ++r) {
        for (int s = 0; s < L; ++s) {
          const int64_t i = int64_t{r} * L + s;
          const double f = kind_ == DecayKind::kScalar && s <= r ? std::exp(b_[r] - b_[s]) : 1.0;
          a_qk_[i] = s <= r ? static_cast<float>(a_qk_[i] * f) : 0.0f;
          if (delta_) a_kk_[i] = s < r ? static_cast<float>(beta_[r] * a_kk_[i] * f) : 0.0f;
        }
      }
      return;
    }
    // The diagonal decay does not factor out of the dot products: one exp per (r, s, d), in
    // double. The double A_kk is kept for the transition's WY solve (StepTransition).
    if (delta_) akk_d_.assign(int64_t{L} * L, 0.0);
    for (int r = 0; r < L; ++r) {
      const double* br = &b_[int64_t{r} * dk];
      const float* qr = &q_[int64_t{r} * dk];
      const float* kr = &k_[int64_t{r} * dk];
      for (int s = 0; s < L; ++s) {
        const int64_t i = int64_t{r} * L + s;
        if (s > r) {
          a_qk_[i] = 0.0f;
          if (delta_) a_kk_[i] = 0.0f;
          continue;
        }
        const double* bs = &b_[int64_t{s} * dk];
        const float* ks = &k_[int64_t{s} * dk];
        double aq = 0.0, ak = 0.0;
        for (int d = 0; d < dk; ++d) {
          const double w = ks[d] * std::exp(br[d] - bs[d]);
          aq += qr[d] * w;
          ak += kr[d] * w;
        }
        a_qk_[i] = static_cast<float>(aq);
        if (delta_ && s < r) {
          akk_d_[i] = beta_[r] * ak;
          a_kk_[i] = static_cast<float>(akk_d_[i]);
        } else if (delta_) {
          a_kk_[i] = 0.0f;
        }
      }
    }
  }

  // q_ <- e^b . Q, k_hat_ <- e^{b_L - b} . K, and (delta) w_ <- beta e^b . K before the solve.
  void BuildKeyFactors() {
    const int L = len_, dk = dk_;
    for (int r = 0; r < L; ++r) {
      for (int d = 0; d < dk; ++d) {
        const int64_t i = int64_t{r} * dk + d;
        const double eb = Factor(eb_, r, d), eend = Factor(eend_, r, d);
        q_[i] = static_cast<float>(q_[i] * eb);
        k_hat_[i] = static_cast<float>(k_[i] * eend);
        if (delta_) w_[i] = static_cast<float>(beta_[r] * eb * k_[i]);
      }
    }
  }

  // (I + A_kk) X = B for X in {U, W}: A_kk is strictly lower, the diagonal is the implied 1.
  void SolveWy() {
    const int L = len_;
    for (int r = 0; r < L; ++r) {
      for (int j = 0; j < dv_; ++j) u_[int64_t{r} * dv_ + j] *= beta_[r];
    }
    cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, L, dv_, 1.0f,
                a_kk_.data(), L, u_.data(), dv_);
    cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, L, dk_, 1.0f,
                a_kk_.data(), L, w_.data(), dk_);
  }

  DecayKind kind_;
  bool delta_;
  int dk_, dv_;
  int len_ = 0;
  std::vector<float> q_, k_, k_hat_, w_, u_, a_qk_, a_kk_, v_new_, beta_, decay_end_;
  // Chunk-local cumulative log-decay b, kept in double (its rounding would enter every
  // exponent), and the factors e^b and e^{b_L - b}: [L] for a scalar decay, [L, dk] diagonal.
  std::vector<double> b_, eb_, eend_;
  std::vector<double> wd_, khd_, vtd_, akk_d_;
};

}  // namespace

Status ChunkedForward(Variant variant, const Shape& shape, const Inputs& in,
                      const float* initial_state, const Outputs& out, const ChunkOptions& options) {
  HYPIC_RETURN_IF_ERROR(Validate(variant, shape, in));
  const int chunk = options.chunk_size;
  if (chunk != 16 && chunk != 32 && chunk != 64) {
    return BadRequest("chunk_size must be 16, 32 or 64, got " + std::to_string(chunk));
  }
  const int dk = shape.dk, dv = shape.dv, HV = shape.value_heads;
  const int group = HV / shape.key_heads;
  const TransitionForm form = TransitionFormOf(variant);
  const DecayKind kind = DecayKindOf(variant);
  const bool delta = HasBeta(variant);
  const int64_t state_floats = int64_t{dk} * dv;
  const bool zero_chain = out.zero_state != nullptr && initial_state != nullptr;
  const bool dense_t = out.transition != nullptr && form == TransitionForm::kDense;
  const bool main_chain =
      out.o != nullptr || out.final_state != nullptr || (out.zero_state != nullptr && !zero_chain);

  ChunkKernel kernel(variant, shape, chunk);
  std::vector<float> s(state_floats), z(zero_chain ? state_floats : 0);
  std::vector<double> t(dense_t ? int64_t{dk} * dk : 0);
  std::vector<float> t_out(dense_t ? int64_t{dk} * dk : 0);
  std::vector<double> log_sum_diag(form == TransitionForm::kDiagLog ? dk : 0);
  for (int h = 0; h < HV; ++h) {
    const int kh = h / group;
    if (initial_state != nullptr) {
      std::memcpy(s.data(), initial_state + h * state_floats, state_floats * sizeof(float));
    } else {
      std::fill(s.begin(), s.end(), 0.0f);
    }
    std::fill(z.begin(), z.end(), 0.0f);
    std::fill(t.begin(), t.end(), 0.0f);
    for (int d = 0; d < (dense_t ? dk : 0); ++d) t[int64_t{d} * dk + d] = 1.0f;
    const int64_t chain_tokens = main_chain || zero_chain || dense_t ? shape.tokens : 0;
    for (int64_t t0 = 0; t0 < chain_tokens; t0 += chunk) {
      const int len = static_cast<int>(std::min<int64_t>(chunk, shape.tokens - t0));
      kernel.Prepare(shape, in, t0, len, h, kh);
      if (main_chain) {
        float* o = out.o != nullptr ? out.o + (t0 * HV + h) * dv : nullptr;
        kernel.Step(s.data(), o, int64_t{HV} * dv);
      }
      if (zero_chain) kernel.Step(z.data(), nullptr, 0);
      if (dense_t) kernel.StepTransition(t.data());
    }
    if (out.final_state != nullptr) {
      std::memcpy(out.final_state + h * state_floats, s.data(), state_floats * sizeof(float));
    }
    if (out.zero_state != nullptr) {
      std::memcpy(out.zero_state + h * state_floats, zero_chain ? z.data() : s.data(),
                  state_floats * sizeof(float));
    }
    if (out.transition != nullptr) {
      // The log forms are exact sums of g; no chain needed.
      double log_sum = 0.0;
      std::fill(log_sum_diag.begin(), log_sum_diag.end(), 0.0);
      for (int64_t tok = 0; tok < shape.tokens && kind != DecayKind::kNone && !delta; ++tok) {
        if (kind == DecayKind::kScalar) {
          log_sum += in.g[tok * HV + h];
        } else {
          for (int d = 0; d < dk; ++d) log_sum_diag[d] += in.g[(tok * HV + h) * dk + d];
        }
      }
      std::copy(t.begin(), t.end(), t_out.begin());
      WriteTransition(form, shape, h, t_out.data(), log_sum, log_sum_diag.data(), out.transition);
    }
  }
  return Status::Ok();
}

}  // namespace hypic::linear

// Test-side float64 reference for the linear-attention variants, written independently of
// gpu/linear: per token it forms the dense A_t and b_t of MATH.md §2 and runs
// S_t = A_t S_{t-1} + b_t, T_t = A_t T_{t-1} in double. Also random problem generators with
// realistic gates. Header-only; not thread-safe (each test owns its Problem).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu/linear/linear_attention.h"
#include "tests/support/seeded_rng.h"

namespace hypic::linear::testing {

struct Problem {
  Variant variant = Variant::kLinear;
  Shape shape;
  std::vector<float> q, k, v, g, beta, initial;

  Inputs inputs() const {
    Inputs in;
    in.q = q.data();
    in.k = k.data();
    in.v = v.data();
    in.g = g.empty() ? nullptr : g.data();
    in.beta = beta.empty() ? nullptr : beta.data();
    return in;
  }
  int64_t state_floats() const { return int64_t{shape.value_heads} * shape.dk * shape.dv; }
};

inline void L2NormalizeRows(std::vector<float>& x, int dim) {
  for (size_t r = 0; r + dim <= x.size(); r += dim) {
    double n = 0;
    for (int d = 0; d < dim; ++d) n += double{x[r + d]} * x[r + d];
    const double inv = 1.0 / std::sqrt(n + 1e-6);
    for (int d = 0; d < dim; ++d) x[r + d] = static_cast<float>(x[r + d] * inv);
  }
}

// RetNet's per-head decay gamma_h = 1 - 2^(-5-h), as a log.
inline float RetNetLogGamma(int head) {
  return static_cast<float>(std::log1p(-std::ldexp(1.0, -5 - head)));
}

// Random normalised q/k, normal v, beta in (0.05, 0.95) and log-decays in [-max_decay, 0].
inline Problem MakeProblem(Variant variant, const Shape& shape, uint64_t seed,
                           float max_decay = 0.05f, bool with_initial = true) {
  hypic::testing::SeededRng rng(seed);
  Problem p;
  p.variant = variant;
  p.shape = shape;
  const int64_t T = shape.tokens;
  const int H = shape.key_heads, HV = shape.value_heads, dk = shape.dk, dv = shape.dv;
  p.q = rng.NormalVector(T * H * dk);
  p.k = rng.NormalVector(T * H * dk);
  p.v = rng.NormalVector(T * HV * dv);
  L2NormalizeRows(p.q, dk);
  L2NormalizeRows(p.k, dk);
  if (HasGate(variant)) {
    const int64_t per = HasDiagGate(variant) ? dk : 1;
    p.g.resize(T * HV * per);
    for (int64_t t = 0; t < T; ++t) {
      for (int h = 0; h < HV; ++h) {
        for (int64_t d = 0; d < per; ++d) {
          p.g[(t * HV + h) * per + d] =
              variant == Variant::kRetNet ? RetNetLogGamma(h) : rng.Uniform(-max_decay, 0);
        }
      }
    }
  }
  if (HasBeta(variant)) {
    p.beta.resize(T * HV);
    for (auto& b : p.beta) b = rng.Uniform(0.05f, 0.95f);
  }
  if (with_initial) p.initial = rng.NormalVector(p.state_floats(), 0.5f);
  return p;
}

struct Reference {
  std::vector<double> o, final_state, zero_state, transition;  // transition dense [HV,dk,dk]
};

// The float64 per-token reference. `initial` may be empty (zero).
inline Reference ReferenceForward(const Problem& p) {
  const Shape& s = p.shape;
  const int H = s.key_heads, HV = s.value_heads, dk = s.dk, dv = s.dv, group = HV / H;
  Reference r;
  r.o.assign(s.tokens * HV * dv, 0.0);
  r.final_state.assign(p.state_floats(), 0.0);
  r.zero_state.assign(p.state_floats(), 0.0);
  r.transition.assign(int64_t{HV} * dk * dk, 0.0);
  const bool delta = HasBeta(p.variant);
  std::vector<double> a(dk * dk), sf(dk * dv), sz(dk * dv), tt(dk * dk), tmp;
  for (int h = 0; h < HV; ++h) {
    const int kh = h / group;
    for (int i = 0; i < dk * dv; ++i) {
      sf[i] = p.initial.empty() ? 0.0 : p.initial[int64_t{h} * dk * dv + i];
      sz[i] = 0.0;
    }
    std::fill(tt.begin(), tt.end(), 0.0);
    for (int d = 0; d < dk; ++d) tt[d * dk + d] = 1.0;
    for (int64_t t = 0; t < s.tokens; ++t) {
      const float* k = &p.k[(t * H + kh) * dk];
      const float* q = &p.q[(t * H + kh) * dk];
      const float* v = &p.v[(t * HV + h) * dv];
      const double beta = delta ? p.beta[t * HV + h] : 1.0;
      // decay[d]: the diagonal factor of this token.
      std::vector<double> decay(dk, 1.0);
      if (HasGate(p.variant)) {
        for (int d = 0; d < dk; ++d) {
          decay[d] = HasDiagGate(p.variant) ? std::exp(double{p.g[(t * HV + h) * dk + d]})
                                            : std::exp(double{p.g[t * HV + h]});
        }
      }
      // A = (I - beta k k^T) Diag(decay) for the delta family, Diag(decay) otherwise.
      for (int i = 0; i < dk; ++i) {
        for (int j = 0; j < dk; ++j) {
          double x = i == j ? 1.0 : 0.0;
          if (delta) x -= beta * k[i] * k[j];
          a[i * dk + j] = x * decay[j];
        }
      }
      auto apply = [&](std::vector<double>& m, int cols, bool add_b) {
        tmp.assign(dk * cols, 0.0);
        for (int i = 0; i < dk; ++i) {
          for (int l = 0; l < dk; ++l) {
            const double ail = a[i * dk + l];
            if (ail == 0.0) continue;
            for (int j = 0; j < cols; ++j) tmp[i * cols + j] += ail * m[l * cols + j];
          }
          if (add_b) {
            for (int j = 0; j < cols; ++j) tmp[i * cols + j] += beta * k[i] * v[j];
          }
        }
        m.swap(tmp);
      };
      apply(sf, dv, true);
      apply(sz, dv, true);
      apply(tt, dk, false);
      for (int j = 0; j < dv; ++j) {
        double acc = 0;
        for (int d = 0; d < dk; ++d) acc += sf[d * dv + j] * q[d];
        r.o[(t * HV + h) * dv + j] = acc;
      }
    }
    std::copy(sf.begin(), sf.end(), r.final_state.begin() + int64_t{h} * dk * dv);
    std::copy(sz.begin(), sz.end(), r.zero_state.begin() + int64_t{h} * dk * dv);
    std::copy(tt.begin(), tt.end(), r.transition.begin() + int64_t{h} * dk * dk);
  }
  return r;
}

// ||x - ref|| / ||ref|| (Frobenius); absolute norm of x when ref is zero.
template <typename A, typename B>
double RelError(const std::vector<A>& x, const std::vector<B>& ref) {
  double num = 0, den = 0;
  const size_t n = std::min(x.size(), ref.size());
  for (size_t i = 0; i < n; ++i) {
    const double d = double(x[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  if (x.size() != ref.size()) return 1e30;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace hypic::linear::testing

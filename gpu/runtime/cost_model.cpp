#include "gpu/runtime/cost_model.h"

#include <algorithm>
#include <cmath>

namespace hypic::runtime {

namespace {
// Ridge weight relative to the data weight: small enough that consistent data overrides the
// prior, large enough to keep the 3x3 system well posed when only one length was seen.
constexpr double kRidge = 1e-6;
constexpr double kTokensUnit = 1024.0;
}  // namespace

CostModel::CostModel(CostCoefficients prior, double forgetting)
    : prior_{prior.c, prior.a, prior.b},
      forgetting_(std::clamp(forgetting, 1e-3, 1.0)),
      theta_(prior_) {}

CostCoefficients CostModel::PriorFromShape(const CostShape& shape, double flops_per_second,
                                           double seconds_per_call) {
  // Per unit u = n/1024: linear flops scale with u * 1024, causal pairs with (u * 1024)^2 / 2.
  return CostCoefficients{
      seconds_per_call,
      shape.flops_per_token * kTokensUnit / flops_per_second,
      shape.flops_per_token_pair * kTokensUnit * kTokensUnit / 2.0 / flops_per_second,
  };
}

CostModel::Vec3 CostModel::Features(uint32_t n_tokens) {
  double u = static_cast<double>(n_tokens) / kTokensUnit;
  return {1.0, u, u * u};
}

double CostModel::Estimate(uint32_t n_tokens) const {
  Vec3 x = Features(n_tokens);
  MutexLock lock(&mu_);
  double y = theta_[0] * x[0] + theta_[1] * x[1] + theta_[2] * x[2];
  return std::max(y, 0.0);
}

void CostModel::Observe(uint32_t n_tokens, double seconds) {
  if (!std::isfinite(seconds) || seconds < 0.0) return;
  Vec3 x = Features(n_tokens);
  MutexLock lock(&mu_);
  for (auto& row : xtx_) {
    for (double& v : row) v *= forgetting_;
  }
  for (double& v : xty_) v *= forgetting_;
  weight_ *= forgetting_;
  py_ *= forgetting_;
  pp_ *= forgetting_;
  double p = prior_[0] * x[0] + prior_[1] * x[1] + prior_[2] * x[2];
  for (size_t i = 0; i < 3; ++i) {
    for (size_t j = 0; j < 3; ++j) xtx_[i][j] += x[i] * x[j];
    xty_[i] += x[i] * seconds;
  }
  weight_ += 1.0;
  py_ += p * seconds;
  pp_ += p * p;
  ++count_;
  Refit();
}

void CostModel::Refit() {
  // Centre of the ridge: the prior scaled to the data (least-squares scale factor).
  double scale = pp_ > 0.0 ? py_ / pp_ : 1.0;
  Vec3 centre{prior_[0] * scale, prior_[1] * scale, prior_[2] * scale};
  // Ridge per coefficient, relative to the data's own magnitude in that direction.
  std::array<Vec3, 3> m = xtx_;
  Vec3 rhs = xty_;
  for (size_t i = 0; i < 3; ++i) {
    double lambda = kRidge * std::max(xtx_[i][i], weight_ * 1e-6);
    m[i][i] += lambda;
    rhs[i] += lambda * centre[i];
  }
  // Gaussian elimination with partial pivoting on the 3x3 system.
  std::array<size_t, 3> perm{0, 1, 2};
  for (size_t col = 0; col < 3; ++col) {
    size_t piv = col;
    for (size_t r = col + 1; r < 3; ++r) {
      if (std::abs(m[perm[r]][col]) > std::abs(m[perm[piv]][col])) piv = r;
    }
    std::swap(perm[col], perm[piv]);
    double d = m[perm[col]][col];
    if (std::abs(d) < 1e-300) return;  // degenerate: keep the previous fit
    for (size_t r = col + 1; r < 3; ++r) {
      double f = m[perm[r]][col] / d;
      for (size_t k = col; k < 3; ++k) m[perm[r]][k] -= f * m[perm[col]][k];
      rhs[perm[r]] -= f * rhs[perm[col]];
    }
  }
  Vec3 theta{};
  for (size_t i = 3; i-- > 0;) {
    double s = rhs[perm[i]];
    for (size_t k = i + 1; k < 3; ++k) s -= m[perm[i]][k] * theta[k];
    theta[i] = s / m[perm[i]][i];
  }
  for (double v : theta) {
    if (!std::isfinite(v)) return;
  }
  theta_ = theta;
}

CostCoefficients CostModel::coefficients() const {
  MutexLock lock(&mu_);
  return {theta_[0], theta_[1], theta_[2]};
}

size_t CostModel::observations() const {
  MutexLock lock(&mu_);
  return count_;
}

}  // namespace hypic::runtime

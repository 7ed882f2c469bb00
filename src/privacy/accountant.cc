#include "privacy/accountant.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace claw::privacy {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> MakeDefaultOrders() {
  std::vector<double> out;
  for (int x = 1; x < 100; ++x) out.push_back(1 + x / 10.0);
  for (int a = 11; a < 64; ++a) out.push_back(a);
  for (double a : {128.0, 256.0, 512.0, 1024.0}) out.push_back(a);
  return out;
}

// log(exp(a) + exp(b)).
double LogAdd(double a, double b) {
  const double hi = std::max(a, b), lo = std::min(a, b);
  if (lo == -kInf) return hi;
  return hi + std::log1p(std::exp(lo - hi));
}

double LogBinomial(double n, double k) {
  return std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1);
}

// log(erfc(x)), with the asymptotic series where erfc underflows.
double LogErfc(double x) {
  const double r = std::erfc(x);
  if (r > 0) return std::log(r);
  const double x2 = x * x;
  return -0.5 * std::log(M_PI) - std::log(x) - x2 - 0.5 / x2 + 0.625 / (x2 * x2) -
         37.0 / 24.0 / (x2 * x2 * x2) + 353.0 / 64.0 / (x2 * x2 * x2 * x2);
}

// log A_α for an integer α: the binomial expansion of Mironov et al. 2019.
double LogAInt(double q, double z, int order) {
  double log_a = -kInf;
  for (int i = 0; i <= order; ++i) {
    const double term = LogBinomial(order, i) + i * std::log(q) + (order - i) * std::log1p(-q) +
                        (double{1} * i * i - i) / (2 * z * z);
    log_a = LogAdd(log_a, term);
  }
  return log_a;
}

// log A_α for a fractional α (arXiv 1908.10530, §3.3). Every term is added
// with its absolute value, as dp_accounting does: an upper bound on the
// exact series, which alternates in sign past α + 1, so never below the
// true ε. Infinite if the series has not settled in 1000 terms.
double LogAFrac(double q, double z, double order) {
  const double z0 = z * z * std::log(1 / q - 1) + 0.5;
  double log_a0 = -kInf, log_a1 = -kInf, last_s0 = -kInf, last_s1 = -kInf;
  for (int i = 0; i < 1000; ++i) {
    const double j = order - i;
    const double coef = LogBinomial(order, i);
    const double s0 = coef + i * std::log(q) + j * std::log1p(-q) +
                      (double{1} * i * i - i) / (2 * z * z) + std::log(0.5) +
                      LogErfc((i - z0) / (M_SQRT2 * z));
    const double s1 = coef + j * std::log(q) + i * std::log1p(-q) + (j * j - j) / (2 * z * z) +
                      std::log(0.5) + LogErfc((z0 - j) / (M_SQRT2 * z));
    log_a0 = LogAdd(log_a0, s0);
    log_a1 = LogAdd(log_a1, s1);
    const double total = LogAdd(log_a0, log_a1);
    if (s0 < last_s0 && s1 < last_s1 && std::max(s0, s1) < total - 30) return total;
    last_s0 = s0;
    last_s1 = s1;
  }
  return kInf;
}

}  // namespace

std::span<const double> DefaultOrders() {
  static const std::vector<double> orders = MakeDefaultOrders();
  return orders;
}

double SampledGaussianRdp(double q, double z, double order) {
  if (q <= 0) return 0;
  if (std::isinf(order) || z <= 0) return kInf;
  if (q >= 1) return order / (2 * z * z);
  if (order <= 1) return kInf;  // 0/0 at order 1: that order gives no bound
  const double log_a = order == std::floor(order) && order < 1e9
                           ? LogAInt(q, z, static_cast<int>(order))
                           : LogAFrac(q, z, order);
  return log_a / (order - 1);
}

EpsilonAt RdpToEpsilon(std::span<const double> orders, std::span<const double> rdp, double delta) {
  if (delta <= 0) {
    const bool none = std::all_of(rdp.begin(), rdp.end(), [](double r) { return r == 0; });
    return {none ? 0 : kInf, 0};
  }
  EpsilonAt best{kInf, 0};
  for (size_t i = 0; i < orders.size() && i < rdp.size(); ++i) {
    const double a = orders[i], r = rdp[i];
    double eps;
    if (r < 0 || delta * delta + std::expm1(-r) > 0) {
      eps = 0;  // δ above the bound from the divergence alone
    } else if (a > 1.01) {
      eps = r + std::log1p(-1 / a) - std::log(delta * a) / (a - 1);
    } else {
      eps = kInf;
    }
    if (eps < best.epsilon) best = {eps, a};
  }
  best.epsilon = std::max(0.0, best.epsilon);
  return best;
}

double RdpToDelta(std::span<const double> orders, std::span<const double> rdp, double epsilon) {
  double best = kInf;
  for (size_t i = 0; i < orders.size() && i < rdp.size(); ++i) {
    const double a = orders[i], r = rdp[i];
    double log_delta = r <= 0 ? -kInf : 0.5 * std::log1p(-std::exp(-r));
    if (a > 1.01) {
      log_delta = std::min(log_delta, (a - 1) * (r - epsilon + std::log1p(-1 / a)) - std::log(a));
    }
    best = std::min(best, log_delta);
  }
  return std::min(std::exp(best), 1.0);
}

RdpAccountant::RdpAccountant(std::span<const double> orders)
    : orders_(orders.begin(), orders.end()), rdp_(orders_.size(), 0.0) {}

void RdpAccountant::Compose(double q, double z, int count) {
  if (count <= 0 || q <= 0) return;
  for (size_t i = 0; i < orders_.size(); ++i) rdp_[i] += count * SampledGaussianRdp(q, z, orders_[i]);
}

EpsilonAt RdpAccountant::Epsilon(double delta) const { return RdpToEpsilon(orders_, rdp_, delta); }

double RdpAccountant::Delta(double epsilon) const { return RdpToDelta(orders_, rdp_, epsilon); }

}  // namespace claw::privacy

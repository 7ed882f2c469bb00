// The privacy accountant of training in rounds (docs/privacy.md): Rényi
// differential privacy (Mironov 2017) of the sampled Gaussian mechanism
// (Mironov, Talwar, Zhang 2019), composed over rounds and converted to an
// (ε, δ) guarantee by the bound of Canonne, Kamath and Steinke (2020),
// Proposition 12 (also Balle et al. 2020).
//
// A round with noise multiplier z (the noise's standard deviation over the
// clip norm) in which each privacy unit (a device's data) took part with
// probability q is, at order α, ε_α(q, z)-RDP; rounds add up at each order;
// ε(δ) is the least over the orders of the conversion. q = 1 is the plain
// Gaussian mechanism, α / (2 z²).
//
// Pure arithmetic in doubles; the same figures as Google's dp_accounting
// (RdpAccountant) to its tests' tolerance (tests/unit/privacy_test.cc).
#pragma once

#include <span>
#include <vector>

namespace claw::privacy {

// The orders the accountant tracks (those of dp_accounting's
// DEFAULT_RDP_ORDERS).
std::span<const double> DefaultOrders();

// ε_α of one round of the sampled Gaussian mechanism. q in [0, 1],
// z ≥ 0 (0: no noise, infinite), α > 1. Infinite when it does not exist.
double SampledGaussianRdp(double q, double z, double order);

// The least ε over the orders such that the composition (rdp[i] at
// orders[i]) is (ε, δ)-DP; and the order that gives it. Infinite if none.
struct EpsilonAt {
  double epsilon;
  double order;
};
EpsilonAt RdpToEpsilon(std::span<const double> orders, std::span<const double> rdp,
                       double delta);
// The least δ over the orders for a given ε.
double RdpToDelta(std::span<const double> orders, std::span<const double> rdp, double epsilon);

class RdpAccountant {
 public:
  explicit RdpAccountant(std::span<const double> orders = DefaultOrders());
  // `count` rounds with these parameters.
  void Compose(double q, double z, int count = 1);
  EpsilonAt Epsilon(double delta) const;
  double Delta(double epsilon) const;
  const std::vector<double>& rdp() const { return rdp_; }

 private:
  std::vector<double> orders_;
  std::vector<double> rdp_;
};

}  // namespace claw::privacy

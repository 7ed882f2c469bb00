// montecarlo: prices options under geometric Brownian motion, or estimates pi,
// by simulating paths. Each task simulates its share of the paths with its
// own random stream (job seed, task index) and returns (count, mean, M2) of
// the discounted payoff; Merge combines them with the parallel variance
// formula in task order, so a job's result is a deterministic function of its
// spec.
//
// params:
//   model   "european_call" | "european_put" | "asian_call" | "pi"
//   paths   total paths, 1 .. 1e13 (at most 1e10 per task)
//   S0, K, r, sigma, T   spot, strike, rate, volatility, years (not for pi)
//   steps   monitoring dates of the Asian average (default 12)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "core/app.h"

namespace claw {

struct MomentSummary {
  uint64_t count = 0;
  double mean = 0;
  double m2 = 0;  // sum of squared deviations from the mean

  void Add(double x) {
    ++count;
    double d = x - mean;
    mean += d / static_cast<double>(count);
    m2 += d * (x - mean);
  }
  // Chan et al.'s pairwise combination.
  void Merge(const MomentSummary& o);
  std::string Encode() const;  // 24 bytes, little-endian
  static Result<MomentSummary> Decode(std::string_view bytes);
};

// Black-Scholes price of a European option (no dividends).
double BlackScholes(bool call, double s0, double k, double r, double sigma, double t);

class MonteCarloApp final : public App {
 public:
  static constexpr uint64_t kMaxPathsPerTask = 10'000'000'000ULL;
  static constexpr uint64_t kMaxPaths = 10'000'000'000'000ULL;

  std::string_view Name() const override { return "montecarlo"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override;
  Result<std::string> Run(std::string_view task_params, const RunContext& ctx) const override;
  Result<nlohmann::json> Merge(const JobSpec& spec,
                               const std::vector<std::string_view>& outputs) const override;
  bool Equivalent(std::string_view params, std::string_view a, std::string_view b) const override;
  // A wrong estimate cannot be told from a right one by looking at it: two
  // agents must agree.
  Redundancy DefaultRedundancy() const override { return {2, 2}; }
};

}  // namespace claw

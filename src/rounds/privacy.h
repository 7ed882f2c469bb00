// Differential privacy for training in rounds (DP-FedAvg, McMahan et al.
// 2018; docs/privacy.md): each privacy unit's delta is clipped to norm C,
// Gaussian noise of standard deviation z·C is added to their sum, and the
// accountant (privacy/accountant.h) counts what each round spent, from what
// happened in it (which units reported).
//
//   "privacy": {"clip_norm": C, "noise_multiplier": z, "delta": 1e-5,
//               "epsilon": 8}                  (epsilon: the budget; optional)
//
// The privacy unit is the data of one device:
//   - a training on a dataset's blobs splits it into `shards`, each a
//     simulated device; with privacy on, each round draws its tasks' shards
//     uniformly without replacement, so a shard takes part with probability
//     q = reporters / shards, and the accountant counts the amplification
//     by sampling (the sampled Gaussian mechanism at that q);
//   - a training on a local dataset (each device's own data): which devices
//     take part is the scheduler's choice, not a random draw, so no
//     amplification is claimed: each round a device reported in is a full
//     Gaussian mechanism (q = 1) for that device, and the training's ε is
//     the worst device's.
// Either way a round counts only the units whose delta was used: a task
// that failed or came late spent nothing of its unit's data.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "rounds/aggregation.h"
#include "rounds/weights.h"

namespace claw::rounds {

struct PrivacySpec {
  bool on = false;
  double clip = 0;      // C
  double noise = 0;     // z
  double delta = 1e-5;  // δ
  double budget = 0;    // ε at which training stops; 0: none
};

// Reads params.privacy (absent or null: off). InvalidArgument naming the
// field: C ≤ 0, z ≤ 0, δ outside (0, 1), ε ≤ 0.
Result<PrivacySpec> ParsePrivacy(const nlohmann::json& params);
nlohmann::json PrivacyToJson(const PrivacySpec& p);

// One round as the accountant sees it.
struct RoundSpend {
  double q = 0;                     // each unit's chance of taking part (shards)
  double z = 0;                     // the noise multiplier the round had
  std::vector<std::string> units;   // who took part (devices, for local data)
};

// ε after the rounds, at δ: for sampled shards the composition of every
// round's sampled Gaussian; for devices (per_unit) the worst unit's
// composition of the rounds it took part in.
double EpsilonSpent(const std::vector<RoundSpend>& rounds, double delta, bool per_unit);

// Planning from the spec alone, at full participation (every task of every
// round reports): ε after one round, and how many of `rounds` fit the
// budget (all when none is set).
struct PrivacyPlan {
  double first_round_epsilon = 0;
  double all_rounds_epsilon = 0;
  uint32_t rounds_in_budget = 0;
};
PrivacyPlan PlanPrivacy(const PrivacySpec& p, double q, uint32_t rounds);

// DP-FedAvg's aggregate of one round's units (each one device's delta,
// already checked): each clipped to C, summed with equal weight, N(0,
// (z·C)²) added to each value of the sum, divided by their number.
struct PrivateMean {
  Weights mean;
  size_t units = 0;
  size_t clipped = 0;  // how many were above C
};
PrivateMean PrivateAverage(const PrivacySpec& p, std::vector<Delta> units);

// The accountant's view of a stored round's info ("privacy": {"q", "z",
// "units"}); none for a round without privacy.
std::optional<RoundSpend> SpendOf(const nlohmann::json& info);

// Scales `w` down to norm `clip` if above it; returns its norm before.
double ClipToNorm(Weights* w, double clip);

// Adds independent N(0, stddev²) to every value, drawn from a key from the
// operating system's CSPRNG (libsodium), so that nobody can predict or
// replay the noise.
void AddGaussianNoise(Weights* w, double stddev);

// The `count` shards (of `shards`) a round's tasks train on with privacy
// on: distinct, uniform, a function of the job's seed and the round (the
// same after a restart). count <= shards.
std::vector<uint64_t> DrawShards(uint64_t seed, uint32_t round, uint32_t count, uint64_t shards);

}  // namespace claw::rounds

// A round's deltas into one: checked, then combined by a rule, then turned
// into the next model by the outer optimizer (docs/adr/0007-training-in-
// rounds.md). Deterministic: the same deltas in the same order give the same
// bytes.
//
//   check    the model's names and shapes, every value finite, the norm at
//            most max_norm (if set) and at most norm_factor × the median
//            norm of the other devices' well-formed deltas (if set), its
//            sample count at most max_samples: a scaled-up delta from a
//            liar is rejected, naming why
//   combine  mean (weighted by each delta's samples), median (coordinate-
//            wise), or trimmed mean (coordinate-wise, dropping the
//            floor(trim × n) largest and smallest values of each coordinate)
//            — the robust rules over devices, not tasks: a device's deltas
//            are first merged into one (their weighted mean), so a device
//            that ran two of a round's three tasks still has one voice
//   outer    fedavg: θ += lr·Δ; nesterov (DiLoCo): g = −Δ, v = μ·v + g,
//            θ −= lr·(g + μ·v); adam (FedAdam, Reddi et al. 2021): m, v
//            moments of g, θ −= lr·m / (√v + ε)
#pragma once

#include <string>
#include <vector>

#include "rounds/weights.h"

namespace claw::rounds {

enum class Rule { kMean, kMedian, kTrimmedMean };
bool ParseRule(std::string_view text, Rule* rule);  // "mean", "median", "trimmed_mean"
std::string_view RuleName(Rule rule);

struct CheckSpec {
  double max_norm = 0;      // 0: no absolute bound
  // 0: no bound relative to the others: a delta's norm at most this many
  // times the median norm of the round's other well-formed deltas
  double norm_factor = 0;
  // The most samples a delta may claim (the task's budget; a liar claiming
  // more would outweigh everyone in the mean). 0: no bound.
  double max_samples = 0;
};

struct Delta {
  Weights weights;
  double samples = 1;  // what the mean weighs it by (> 0)
  // Who made it: deltas of one device are compared with other devices'
  // alone and vote as one. Empty: a device of its own.
  std::string device;
};

struct Verdicts {
  std::vector<size_t> accepted;                          // indexes into the deltas, in order
  std::vector<std::pair<size_t, std::string>> rejected;  // index, why
};

Verdicts CheckDeltas(const Weights& model, const std::vector<Delta>& deltas, const CheckSpec& spec);

// The deltas at `use` with each device's merged into one (their mean
// weighted by samples, which add up), in the order of each device's first
// delta; a delta with no device is its own.
std::vector<Delta> MergeByDevice(const std::vector<Delta>& deltas, const std::vector<size_t>& use);

// The deltas at `use` (indexes into `deltas`, in that order; at least one)
// combined. `trim` is for kTrimmedMean, in [0, 0.5). The deltas must have
// passed CheckDeltas (finite, with finite sample counts).
Weights Combine(const std::vector<Delta>& deltas, const std::vector<size_t>& use, Rule rule,
                double trim = 0.1);

enum class Outer { kFedAvg, kNesterov, kAdam };
bool ParseOuter(std::string_view text, Outer* outer);  // "fedavg", "nesterov", "adam"
std::string_view OuterName(Outer outer);

struct OuterSpec {
  Outer kind = Outer::kFedAvg;
  double lr = 1.0;
  double momentum = 0.9;                              // nesterov
  double beta1 = 0.9, beta2 = 0.99, epsilon = 1e-3;  // adam
};

// Applies the round's combined delta to `model`, keeping the optimizer's
// state in `state` (empty at the first round; tensors "m:<name>" and, for
// adam, "v:<name>").
void OuterStep(const OuterSpec& spec, const Weights& delta, Weights* model, Weights* state);

}  // namespace claw::rounds

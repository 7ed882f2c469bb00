#include "rounds/aggregation.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_map>

#include "common/names.h"

namespace claw::rounds {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// The optimizer's state tensors for `model`, by `prefix` ("m:", "v:"),
// made at zero on first use.
Weights StateBlock(const Weights& model, const Weights& state, const std::string& prefix) {
  std::unordered_map<std::string_view, const Named*> by_name;
  for (const Named& s : state) by_name.emplace(s.name, &s);
  Weights block = ZerosLike(model);
  for (Named& n : block) {
    n.name = prefix + n.name;
    auto it = by_name.find(n.name);
    if (it != by_name.end() && it->second->values.size() == n.values.size()) {
      n.values = it->second->values;
    }
  }
  return block;
}

}  // namespace

constexpr NameTable<Rule, 3> kRules = {
    {{"mean", Rule::kMean}, {"median", Rule::kMedian}, {"trimmed_mean", Rule::kTrimmedMean}}};
constexpr NameTable<Outer, 3> kOuters = {
    {{"fedavg", Outer::kFedAvg}, {"nesterov", Outer::kNesterov}, {"adam", Outer::kAdam}}};

bool ParseRule(std::string_view text, Rule* rule) { return FromName(kRules, text, rule); }
std::string_view RuleName(Rule rule) { return NameOf(kRules, rule); }
bool ParseOuter(std::string_view text, Outer* outer) { return FromName(kOuters, text, outer); }
std::string_view OuterName(Outer outer) { return NameOf(kOuters, outer); }

Verdicts CheckDeltas(const Weights& model, const std::vector<Delta>& deltas, const CheckSpec& spec) {
  Verdicts v;
  std::vector<double> norms(deltas.size(), 0);
  std::vector<std::string> why(deltas.size());
  std::vector<bool> good(deltas.size(), false);
  for (size_t i = 0; i < deltas.size(); ++i) {
    if (Status s = SameShapes(model, deltas[i].weights); !s.ok()) {
      why[i] = s.message();
      continue;
    }
    if (!(deltas[i].samples > 0) || !std::isfinite(deltas[i].samples)) {
      why[i] = "its sample count is not a positive number";
      continue;
    }
    if (spec.max_samples > 0 && deltas[i].samples > spec.max_samples) {
      why[i] = "it claims " + std::to_string(deltas[i].samples) + " samples, more than its task's " +
               std::to_string(spec.max_samples);
      continue;
    }
    norms[i] = Norm(deltas[i].weights);
    if (!std::isfinite(norms[i])) {
      why[i] = "a value is not finite";
      continue;
    }
    if (spec.max_norm > 0 && norms[i] > spec.max_norm) {
      why[i] = "its norm " + std::to_string(norms[i]) + " is above max_norm " +
               std::to_string(spec.max_norm);
      continue;
    }
    good[i] = true;
  }
  for (size_t i = 0; i < deltas.size(); ++i) {
    // Against other devices alone: a liar's own norms must not raise the
    // bar (with two deltas, its one would be half of the median; with
    // two of its own among three, it would be the median).
    std::vector<double> others;
    if (why[i].empty() && spec.norm_factor > 0) {
      for (size_t j = 0; j < deltas.size(); ++j) {
        if (good[j] && j != i &&
            (deltas[i].device.empty() || deltas[j].device != deltas[i].device)) {
          others.push_back(norms[j]);
        }
      }
    }
    if (!others.empty()) {
      const double median = Median(std::move(others));
      if (norms[i] > spec.norm_factor * median) {
        why[i] = "its norm " + std::to_string(norms[i]) + " is above " +
                 std::to_string(spec.norm_factor) + " × the median of the other devices' " +
                 std::to_string(median);
      }
    }
    if (why[i].empty()) v.accepted.push_back(i);
    else v.rejected.emplace_back(i, std::move(why[i]));
  }
  return v;
}

std::vector<Delta> MergeByDevice(const std::vector<Delta>& deltas, const std::vector<size_t>& use) {
  std::vector<Delta> merged;
  std::unordered_map<std::string_view, size_t> slot;
  for (size_t i : use) {
    const Delta& d = deltas[i];
    auto [it, fresh] = d.device.empty() ? std::pair{slot.end(), true}
                                        : slot.emplace(d.device, merged.size());
    if (fresh) {
      merged.push_back(d);
      continue;
    }
    Delta& m = merged[it->second];
    const double total = m.samples + d.samples;
    for (size_t k = 0; k < m.weights.size(); ++k) {
      std::vector<float>& o = m.weights[k].values;
      const std::vector<float>& x = d.weights[k].values;
      for (size_t j = 0; j < o.size(); ++j) {
        o[j] = static_cast<float>((m.samples * o[j] + d.samples * x[j]) / total);
      }
    }
    m.samples = total;
  }
  return merged;
}

Weights Combine(const std::vector<Delta>& deltas, const std::vector<size_t>& use, Rule rule,
                double trim) {
  if (rule != Rule::kMean) {
    std::vector<Delta> devices = MergeByDevice(deltas, use);
    if (devices.size() < use.size()) {
      std::vector<size_t> all(devices.size());
      for (size_t i = 0; i < all.size(); ++i) all[i] = i;
      return Combine(devices, all, rule, trim);
    }
  }
  Weights out = ZerosLike(deltas[use.front()].weights);
  const size_t n = use.size();
  std::vector<double> column(n);
  double total = 0;
  for (size_t i : use) total += deltas[i].samples;
  const size_t cut = rule == Rule::kTrimmedMean
                         ? std::min(static_cast<size_t>(std::floor(trim * static_cast<double>(n))),
                                    (n - 1) / 2)
                         : 0;
  for (size_t k = 0; k < out.size(); ++k) {
    std::vector<float>& o = out[k].values;
    for (size_t j = 0; j < o.size(); ++j) {
      if (rule == Rule::kMean) {
        double sum = 0;
        for (size_t i : use) sum += deltas[i].samples * deltas[i].weights[k].values[j];
        o[j] = static_cast<float>(sum / total);
        continue;
      }
      for (size_t c = 0; c < n; ++c) column[c] = deltas[use[c]].weights[k].values[j];
      if (rule == Rule::kMedian) {
        o[j] = static_cast<float>(Median(column));
      } else {
        std::sort(column.begin(), column.end());
        double sum = 0;
        for (size_t c = cut; c < n - cut; ++c) sum += column[c];
        o[j] = static_cast<float>(sum / static_cast<double>(n - 2 * cut));
      }
    }
  }
  return out;
}

void OuterStep(const OuterSpec& spec, const Weights& delta, Weights* model, Weights* state) {
  const auto lr = static_cast<float>(spec.lr);
  if (spec.kind == Outer::kFedAvg) {
    AddScaled(model, delta, lr);
    state->clear();
    return;
  }
  Weights m = StateBlock(*model, *state, "m:");
  Weights v = spec.kind == Outer::kAdam ? StateBlock(*model, *state, "v:") : Weights{};
  const auto mu = static_cast<float>(spec.momentum), b1 = static_cast<float>(spec.beta1),
             b2 = static_cast<float>(spec.beta2), eps = static_cast<float>(spec.epsilon);
  for (size_t k = 0; k < model->size(); ++k) {
    std::vector<float>& theta = (*model)[k].values;
    std::vector<float>& mk = m[k].values;
    const std::vector<float>& d = delta[k].values;
    for (size_t j = 0; j < theta.size(); ++j) {
      const float g = -d[j];  // the outer gradient: the way back to where the round started
      if (spec.kind == Outer::kNesterov) {
        mk[j] = mu * mk[j] + g;
        theta[j] -= lr * (g + mu * mk[j]);
      } else {
        std::vector<float>& vk = v[k].values;
        mk[j] = b1 * mk[j] + (1 - b1) * g;
        vk[j] = b2 * vk[j] + (1 - b2) * g * g;
        theta[j] -= lr * mk[j] / (std::sqrt(vk[j]) + eps);
      }
    }
  }
  *state = std::move(m);
  state->insert(state->end(), std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
}

}  // namespace claw::rounds

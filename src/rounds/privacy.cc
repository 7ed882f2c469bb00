#include "rounds/privacy.h"

#include <sodium.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>

#include "core/json_fields.h"
#include "privacy/accountant.h"

namespace claw::rounds {
namespace {

using nlohmann::json;

}  // namespace

Result<PrivacySpec> ParsePrivacy(const json& params) {
  PrivacySpec p;
  if (!params.is_object() || !params.contains("privacy") || params["privacy"].is_null()) return p;
  const json& j = params["privacy"];
  if (!j.is_object()) {
    return InvalidArgument("params.privacy: must be an object {\"clip_norm\", \"noise_multiplier\", "
                           "\"delta\", \"epsilon\"}");
  }
  FieldReader f(j, "params.privacy");
  CLAW_RETURN_IF_ERROR(f.NoUnknownFields({"clip_norm", "noise_multiplier", "delta", "epsilon"}));
  // Ranges are checked here rather than by the reader, to say what a bad
  // value would mean.
  auto number = [&](const char* key, std::optional<double> def) -> Result<double> {
    return f.Number(key, -1e300, 1e300, def);
  };
  auto clip = number("clip_norm", std::nullopt);
  if (!clip.ok()) return clip.status();
  if (!(*clip > 0)) {
    return InvalidArgument("params.privacy.clip_norm: must be above 0 (each device's delta is "
                           "scaled down to this L2 norm)");
  }
  auto noise = number("noise_multiplier", std::nullopt);
  if (!noise.ok()) return noise.status();
  if (*noise < 0) return InvalidArgument("params.privacy.noise_multiplier: must not be negative");
  if (*noise == 0) {
    return InvalidArgument("params.privacy.noise_multiplier: 0 adds no noise, which is no "
                           "differential privacy (ε would be infinite); clip alone with "
                           "aggregation.max_norm");
  }
  auto delta = number("delta", 1e-5);
  if (!delta.ok()) return delta.status();
  if (!(*delta > 0 && *delta < 1)) {
    return InvalidArgument("params.privacy.delta: must be between 0 and 1 (exclusive); well below "
                           "1 / the number of devices, e.g. 1e-5");
  }
  auto budget = number("epsilon", 0.0);
  if (!budget.ok()) return budget.status();
  if (j.contains("epsilon") && !(*budget > 0)) {
    return InvalidArgument("params.privacy.epsilon: the budget must be above 0 (leave it out for "
                           "none)");
  }
  p.on = true;
  p.clip = *clip;
  p.noise = *noise;
  p.delta = *delta;
  p.budget = *budget;
  return p;
}

json PrivacyToJson(const PrivacySpec& p) {
  if (!p.on) return nullptr;
  json j = {{"clip_norm", p.clip}, {"noise_multiplier", p.noise}, {"delta", p.delta}};
  if (p.budget > 0) j["epsilon"] = p.budget;
  return j;
}

double EpsilonSpent(const std::vector<RoundSpend>& rounds, double delta, bool per_unit) {
  if (!per_unit) {
    privacy::RdpAccountant acc;
    for (const RoundSpend& r : rounds) acc.Compose(r.q, r.z);
    return acc.Epsilon(delta).epsilon;
  }
  // Each unit's rounds, as (z, count): most rounds share one z.
  std::map<std::string, std::map<double, int>> by_unit;
  for (const RoundSpend& r : rounds) {
    for (const std::string& u : r.units) by_unit[u][r.z]++;
  }
  double worst = 0;
  std::map<std::map<double, int>, double> seen;  // units with the same history
  for (const auto& [unit, history] : by_unit) {
    auto [it, fresh] = seen.emplace(history, 0.0);
    if (fresh) {
      privacy::RdpAccountant acc;
      for (auto [z, count] : history) acc.Compose(1, z, count);
      it->second = acc.Epsilon(delta).epsilon;
    }
    worst = std::max(worst, it->second);
  }
  return worst;
}

PrivacyPlan PlanPrivacy(const PrivacySpec& p, double q, uint32_t rounds) {
  PrivacyPlan plan;
  auto after = [&](uint32_t n) {
    privacy::RdpAccountant acc;
    acc.Compose(q, p.noise, static_cast<int>(n));
    return acc.Epsilon(p.delta).epsilon;
  };
  plan.first_round_epsilon = after(1);
  plan.all_rounds_epsilon = after(rounds);
  if (p.budget <= 0 || plan.all_rounds_epsilon <= p.budget) {
    plan.rounds_in_budget = rounds;
    return plan;
  }
  // ε grows with the rounds: the last count within the budget.
  uint32_t lo = 0, hi = rounds;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (after(mid) <= p.budget) lo = mid;
    else hi = mid - 1;
  }
  plan.rounds_in_budget = lo;
  return plan;
}

PrivateMean PrivateAverage(const PrivacySpec& p, std::vector<Delta> units) {
  PrivateMean out;
  out.units = units.size();
  if (units.empty()) return out;
  out.mean = ZerosLike(units.front().weights);
  for (Delta& d : units) {
    if (ClipToNorm(&d.weights, p.clip) > p.clip) out.clipped++;
    AddScaled(&out.mean, d.weights, 1.0f);
  }
  AddGaussianNoise(&out.mean, p.noise * p.clip);
  const auto inv = static_cast<float>(1.0 / static_cast<double>(units.size()));
  for (Named& t : out.mean) {
    for (float& x : t.values) x *= inv;
  }
  return out;
}

std::optional<RoundSpend> SpendOf(const json& info) {
  if (!info.is_object() || !info.contains("privacy") || !info["privacy"].is_object()) {
    return std::nullopt;
  }
  const json& p = info["privacy"];
  RoundSpend r;
  r.q = p.value("q", 0.0);
  r.z = p.value("noise_multiplier", 0.0);
  if (p.contains("devices") && p["devices"].is_array()) {
    for (const json& u : p["devices"]) {
      if (u.is_string()) r.units.push_back(u.get<std::string>());
    }
  }
  return r;
}

double ClipToNorm(Weights* w, double clip) {
  const double norm = Norm(*w);
  if (norm > clip) {
    const auto scale = static_cast<float>(clip / norm);
    for (Named& t : *w) {
      for (float& x : t.values) x *= scale;
    }
  }
  return norm;
}

void AddGaussianNoise(Weights* w, double stddev) {
  if (stddev <= 0) return;
  unsigned char key[randombytes_SEEDBYTES];
  randombytes_buf(key, sizeof key);
  // Uniforms from ChaCha20 keyed by `key`, a block at a time; Box-Muller
  // turns two 53-bit uniforms in (0, 1] into two normals.
  std::vector<uint64_t> block(4096);
  size_t used = block.size();
  uint64_t counter = 0;
  auto uniform = [&] {
    if (used == block.size()) {
      unsigned char nonce[crypto_stream_chacha20_NONCEBYTES] = {};
      std::memcpy(nonce, &counter, sizeof counter);
      ++counter;
      crypto_stream_chacha20(reinterpret_cast<unsigned char*>(block.data()),
                             block.size() * sizeof(uint64_t), nonce, key);
      used = 0;
    }
    return (static_cast<double>(block[used++] >> 11) + 1) * 0x1.0p-53;
  };
  double spare = 0;
  bool have_spare = false;
  for (Named& t : *w) {
    for (float& x : t.values) {
      double n;
      if (have_spare) {
        n = spare;
        have_spare = false;
      } else {
        const double r = std::sqrt(-2 * std::log(uniform())), theta = 2 * M_PI * uniform();
        n = r * std::cos(theta);
        spare = r * std::sin(theta);
        have_spare = true;
      }
      x = static_cast<float>(x + stddev * n);
    }
  }
  sodium_memzero(key, sizeof key);
}

std::vector<uint64_t> DrawShards(uint64_t seed, uint32_t round, uint32_t count, uint64_t shards) {
  // A partial Fisher-Yates over the shard numbers, by a generator seeded
  // from the job's seed and the round.
  std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ULL ^ (uint64_t{round} << 1 | 1));
  std::map<uint64_t, uint64_t> swapped;  // sparse: shards may be many
  auto at = [&](uint64_t i) {
    auto it = swapped.find(i);
    return it == swapped.end() ? i : it->second;
  };
  std::vector<uint64_t> out;
  out.reserve(count);
  for (uint64_t i = 0; i < count && i < shards; ++i) {
    const uint64_t j = i + gen() % (shards - i);
    const uint64_t pick = at(j);
    swapped[j] = at(i);
    out.push_back(pick);
  }
  return out;
}

}  // namespace claw::rounds

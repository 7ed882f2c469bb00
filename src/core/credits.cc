#include "core/credits.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace claw {
namespace {
constexpr double kSecondsPerDay = 86400;
}  // namespace

double ClaimedFlop(double device_flops, uint64_t runtime_us, double bound_flop) {
  const double claimed = std::max(device_flops, 0.0) * static_cast<double>(runtime_us) * 1e-6;
  return std::clamp(claimed, 0.0, std::max(bound_flop, 0.0));
}

double QuorumClaim(std::span<const double> claims) {
  if (claims.empty()) return 0;
  return *std::min_element(claims.begin(), claims.end());
}

void UpdateRecentAverage(RecentAverage& rac, double now_s, double work_start_s, double work) {
  if (rac.updated_s != 0) {
    const double diff = std::max(0.0, now_s - rac.updated_s);
    const double weight = std::exp(-diff * std::numbers::ln2 / kCreditHalfLifeSeconds);
    rac.average *= weight;
    if (1.0 - weight > 1e-6) {
      rac.average += (1 - weight) * (work / (diff / kSecondsPerDay));
    } else {
      // The limit as diff -> 0 (diff cancels out).
      rac.average += std::numbers::ln2 * work * kSecondsPerDay / kCreditHalfLifeSeconds;
    }
  } else if (work != 0) {
    // BOINC divides by the time since the work was sent; for a task of a
    // second that makes a rate of a day's credit from one result. At least
    // a day, here: a device's first result counts as its day's work.
    const double days = std::max(now_s - work_start_s, kSecondsPerDay) / kSecondsPerDay;
    rac.average = work / days;
  }
  rac.updated_s = now_s;
}

double DecayedAverage(const RecentAverage& rac, double now_s) {
  if (rac.updated_s == 0) return 0;
  const double diff = std::max(0.0, now_s - rac.updated_s);
  return rac.average * std::exp(-diff * std::numbers::ln2 / kCreditHalfLifeSeconds);
}

int64_t UtcDay(Time t) {
  const int64_t s = t.unix_ms() / 1000;
  return s >= 0 ? s / 86400 : (s - 86399) / 86400;
}

CreditChanges CreditBook::Apply(std::span<const CreditGrant> grants, Time now) {
  CreditChanges out;
  if (grants.empty()) return out;
  // One RAC update per agent per batch: the batch's work as one lump.
  struct Sum {
    double credit = 0;
    int64_t results = 0;
    uint64_t runtime_us = 0;
    const std::string* owner = nullptr;
  };
  std::map<AgentId, Sum> sums;
  for (const CreditGrant& g : grants) {
    Sum& s = sums[g.agent];
    s.credit += g.credit;
    s.results += g.credit < 0 ? -g.results : g.results;
    s.runtime_us = std::max(s.runtime_us, g.runtime_us);
    s.owner = &g.owner;
  }
  const double now_s = static_cast<double>(now.unix_ms()) / 1000;
  const int64_t day = UtcDay(now);
  for (const auto& [agent, s] : sums) {
    CreditAccount& a = accounts_[agent];
    if (!s.owner->empty()) a.owner = *s.owner;
    a.total = std::max(0.0, a.total + s.credit);
    a.results = static_cast<uint64_t>(std::max<int64_t>(0, static_cast<int64_t>(a.results) + s.results));
    UpdateRecentAverage(a.recent, now_s, now_s - static_cast<double>(s.runtime_us) * 1e-6,
                        s.credit);
    a.recent.average = std::max(0.0, a.recent.average);
    out.accounts[agent] = a;
    out.days[{day, agent}] += s.credit;
  }
  return out;
}

}  // namespace claw

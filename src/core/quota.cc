#include "core/quota.h"

#include <chrono>
#include <cstdio>

namespace claw {
namespace {

constexpr double kUsPerHour = 3.6e9;

std::string Hours(double h) {
  char buf[32];
  std::snprintf(buf, sizeof buf, h >= 100 ? "%.0f" : "%.2f", h);
  return buf;
}

}  // namespace

std::string MonthText(int32_t month) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d-%02d", month / 100, month % 100);
  return buf;
}

int32_t UtcMonth(Time t) {
  using namespace std::chrono;
  const sys_days day = floor<days>(sys_time<milliseconds>(milliseconds(t.unix_ms())));
  const year_month_day ymd(day);
  return static_cast<int32_t>(static_cast<int>(ymd.year()) * 100 +
                              static_cast<int>(static_cast<unsigned>(ymd.month())));
}

Time StartOfNextMonth(int32_t month) {
  using namespace std::chrono;
  const year_month ym = year(month / 100) / std::chrono::month(static_cast<unsigned>(month % 100)) +
                        months(1);
  const sys_days first = ym / day(1);
  return Time::FromUnixMs(duration_cast<milliseconds>(first.time_since_epoch()).count());
}

void QuotaBook::Load(int32_t month, std::map<std::string, uint64_t> used_us,
                     std::map<std::string, std::string> tiers) {
  month_ = month;
  used_us_ = std::move(used_us);
  tiers_ = std::move(tiers);
  for (const auto& [user, us] : used_us_) {
    const TierPolicy& p = PolicyOf(user);
    if (p.node_hours < 0) continue;
    const double h = static_cast<double>(us) / kUsPerHour;
    warned_[user] = h >= options_.warn_fraction * p.node_hours;
    held_[user] = h >= p.node_hours;
  }
}

const TierPolicy& QuotaBook::PolicyOf(const std::string& user) const {
  static const TierPolicy kUnlimited{-1, 1};
  auto t = tiers_.find(user);
  if (t == tiers_.end()) return kUnlimited;  // not a user of the API (a training round's own jobs)
  auto p = options_.tiers.find(t->second);
  return p == options_.tiers.end() ? kUnlimited : p->second;
}

std::vector<QuotaEvent> QuotaBook::SetTier(const std::string& user, const std::string& tier) {
  tiers_[user] = tier;
  const TierPolicy& p = PolicyOf(user);
  auto u = used_us_.find(user);
  const double h = u == used_us_.end() ? 0 : static_cast<double>(u->second) / kUsPerHour;
  const bool over = p.node_hours >= 0 && h >= p.node_hours;
  bool& held = held_[user];
  if (over == held) return {};
  held = over;
  if (over) return {QuotaEvent{QuotaEvent::kHeld, user, Reason(user)}};
  return {QuotaEvent{QuotaEvent::kReleased, user, "now in the " + tier + " tier"}};
}

double QuotaBook::Weight(const std::string& user) const { return PolicyOf(user).weight; }

std::string QuotaBook::Reason(const std::string& user) const {
  const TierPolicy& p = PolicyOf(user);
  auto u = used_us_.find(user);
  const double used = u == used_us_.end() ? 0 : static_cast<double>(u->second) / kUsPerHour;
  auto t = tiers_.find(user);
  return "over quota: " + user + " used " + Hours(used) + " of " + Hours(p.node_hours) +
         " node-hours in " + MonthText(month_) + " (" + (t == tiers_.end() ? "" : t->second) +
         " tier); held until " + MonthText(UtcMonth(StartOfNextMonth(month_))) + "-01 00:00 UTC";
}

std::optional<std::string> QuotaBook::HeldReason(const std::string& user) const {
  auto h = held_.find(user);
  if (h == held_.end() || !h->second) return std::nullopt;
  return Reason(user);
}

std::vector<QuotaEvent> QuotaBook::Roll(Time now) {
  std::vector<QuotaEvent> out;
  const int32_t month = UtcMonth(now);
  if (month == month_) return out;
  month_ = month;
  used_us_.clear();
  warned_.clear();
  for (auto& [user, held] : held_) {
    if (held) out.push_back(QuotaEvent{QuotaEvent::kReleased, user, "a new month"});
  }
  held_.clear();
  return out;
}

std::vector<QuotaEvent> QuotaBook::Charge(std::span<const UsageCharge> charges, Time now) {
  std::vector<QuotaEvent> out = Roll(now);
  for (const UsageCharge& c : charges) {
    const uint64_t before = used_us_[c.user];
    const uint64_t after = before + c.node_us;
    used_us_[c.user] = after;
    const TierPolicy& p = PolicyOf(c.user);
    if (p.node_hours < 0) continue;
    const double h = static_cast<double>(after) / kUsPerHour;
    if (!warned_[c.user] && h >= options_.warn_fraction * p.node_hours) {
      warned_[c.user] = true;
      out.push_back(QuotaEvent{QuotaEvent::kWarned, c.user,
                               c.user + " used " + Hours(h) + " of " + Hours(p.node_hours) +
                                   " node-hours in " + MonthText(month_)});
    }
    if (!held_[c.user] && h >= p.node_hours) {
      held_[c.user] = true;
      out.push_back(QuotaEvent{QuotaEvent::kHeld, c.user, Reason(c.user)});
    }
  }
  return out;
}

std::vector<UserUsage> QuotaBook::Usage() const {
  std::map<std::string, UserUsage> rows;
  for (const auto& [user, tier] : tiers_) rows[user] = UserUsage{user, tier};
  for (const auto& [user, us] : used_us_) {
    rows[user].user = user;
    rows[user].used_hours = static_cast<double>(us) / kUsPerHour;
  }
  std::vector<UserUsage> out;
  for (auto& [user, row] : rows) {
    row.limit_hours = PolicyOf(user).node_hours;
    auto h = held_.find(user);
    row.held = h != held_.end() && h->second;
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace claw

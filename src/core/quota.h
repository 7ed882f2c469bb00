// Quotas by tier: node-hours a month per user (ADR 0011).
//
// A user's jobs consume the run time of every result their tasks settle
// with (all replicas: what the network spent), charged when the task
// settles, per calendar month (UTC). A user at or past `warn_fraction` of
// the tier's hours is warned once a month; one at or past the limit has
// their running and new jobs held — kept, never dropped, with the reason —
// until the month rolls over or their tier changes. The tier's weight is
// its share in the scheduler's fair share between users.
//
// Pure: no clock of its own, no I/O. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"

namespace claw {

struct TierPolicy {
  double node_hours = -1;  // a month; < 0: unlimited
  double weight = 1;       // share in fair share
};

struct QuotaOptions {
  // free 100 node-hours a month, researcher 1,000, professional 10,000,
  // enterprise and admin unlimited; weights 1, 2, 4, 8, 8.
  std::map<std::string, TierPolicy> tiers = {{"free", {100, 1}},
                                             {"researcher", {1000, 2}},
                                             {"professional", {10000, 4}},
                                             {"enterprise", {-1, 8}},
                                             {"admin", {-1, 8}}};
  double warn_fraction = 0.8;
};

// Run time a user's jobs used, for one batch (the scheduler's).
struct UsageCharge {
  std::string user;
  uint64_t node_us = 0;
};

// UTC year * 100 + month (202611).
int32_t UtcMonth(Time t);
// "2026-11".
std::string MonthText(int32_t month);
// The first instant of the month after `month`.
Time StartOfNextMonth(int32_t month);

struct QuotaEvent {
  enum Kind { kWarned, kHeld, kReleased } kind;
  std::string user;
  std::string reason;  // for kHeld: why, as `claw why` says it
};

struct UserUsage {
  std::string user;
  std::string tier;
  double used_hours = 0;
  double limit_hours = -1;  // < 0: unlimited
  bool held = false;
};

class QuotaBook {
 public:
  explicit QuotaBook(QuotaOptions options = {}) : options_(std::move(options)) {}

  // The month's usage as stored, and each user's tier.
  void Load(int32_t month, std::map<std::string, uint64_t> used_us,
            std::map<std::string, std::string> tiers);
  // A new or changed tier; holds or releases the user if the new limit says so.
  std::vector<QuotaEvent> SetTier(const std::string& user, const std::string& tier);

  // Charges a batch of usage at `now`; a month that has begun since resets
  // every user first. Returns who crossed the warning line or the limit,
  // and who was released (a new month).
  std::vector<QuotaEvent> Charge(std::span<const UsageCharge> charges, Time now);
  // A new month releases everyone held (call on every tick).
  std::vector<QuotaEvent> Roll(Time now);

  // Why `user`'s jobs are held now; nullopt if they are not.
  std::optional<std::string> HeldReason(const std::string& user) const;
  double Weight(const std::string& user) const;
  int32_t month() const { return month_; }
  // Every user with a tier, or usage this month.
  std::vector<UserUsage> Usage() const;
  std::map<std::string, uint64_t> used_us() const { return used_us_; }

 private:
  const TierPolicy& PolicyOf(const std::string& user) const;
  std::string Reason(const std::string& user) const;

  QuotaOptions options_;
  int32_t month_ = 0;
  std::map<std::string, uint64_t> used_us_;
  std::map<std::string, std::string> tiers_;
  std::map<std::string, bool> warned_;  // this month
  std::map<std::string, bool> held_;
};

}  // namespace claw

// Credit for contributors, counted as BOINC counts it (ADR 0010).
//
// Unit: the Cobblestone, 1/200 of a day of a 1 GFLOPS device (4.32e11
// floating-point operations), so that figures compare with BOINC projects'.
//
// A validated result claims its device's FLOPS (as the agent measured them
// at start) times the run time its agent reported, and never more than the
// task's bound: the app's own estimate of the task's work (TaskSpec::
// cost_flop) times CreditOptions::bound_factor. In a quorum every valid
// result earns the lowest claim among them, so one device that inflates its
// FLOPS or its run time gains nothing over the honest ones; a result that
// loses the vote earns nothing. A result accepted on a trusted agent's word
// alone earns its claim (still bounded) and gives it back if a later check
// revokes it.
//
// Recent average credit (RAC) decays with a one-week half-life, updated as
// BOINC's update_average does (lib/util.cpp): per day of credit, so a
// device that returns 100 credits a day settles at a RAC of 100.
//
// Pure: no clock of its own, no I/O. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/types.h"

namespace claw {

inline constexpr double kFlopPerCredit = 86400e9 / 200;
inline constexpr double kCreditHalfLifeSeconds = 7 * 86400.0;

struct CreditOptions {
  // A result claims at most this many times its task's estimated work: an
  // estimate is an estimate (real devices differ in what a FLOP costs), but
  // a claim past it is not believed.
  double bound_factor = 2.0;
};

// The FLOP a result claims: device FLOPS × run time, at most `bound_flop`.
double ClaimedFlop(double device_flops, uint64_t runtime_us, double bound_flop);

// What a quorum's valid results each earn: the lowest of their claims
// (0 for none).
double QuorumClaim(std::span<const double> claims);

// One result's credit, as the scheduler grants it (negative when a revoked
// result gives back what it earned).
struct CreditGrant {
  JobId job;
  uint32_t index = 0;
  AgentId agent;
  std::string owner;  // the agent's owner; empty when unknown
  double credit = 0;
  uint64_t runtime_us = 0;  // the longest of them
  // How many results this grant is for: the scheduler folds consecutive
  // grants of one job and agent into one (a batch of no-op results is
  // mostly one agent's).
  int64_t results = 1;
};

struct RecentAverage {
  double average = 0;  // credit per day
  double updated_s = 0;  // unix seconds of the last update; 0: never
};

// BOINC's update_average: `work` credits done between `work_start_s` (the
// first time only) or the last update, and `now_s`. The first time, the
// work counts as done over at least a day (BOINC's would make a day's rate
// of a one-second task's credit).
void UpdateRecentAverage(RecentAverage& rac, double now_s, double work_start_s, double work);
// The average as it stands at `now_s` with no new work since.
double DecayedAverage(const RecentAverage& rac, double now_s);

// A contributor's device (or, summed, a user): what it has earned.
struct CreditAccount {
  std::string owner;
  double total = 0;
  uint64_t results = 0;  // results credited (less those revoked)
  RecentAverage recent;
};

// Credit per agent and per UTC day, as the coordinator keeps it. Apply folds
// one batch of grants in and returns what changed, for the store.
struct CreditChanges {
  std::map<AgentId, CreditAccount> accounts;  // their new values
  // (day number since 1970-01-01 UTC, agent) -> credit added that day
  std::map<std::pair<int64_t, AgentId>, double> days;
  bool empty() const { return accounts.empty(); }
};

class CreditBook {
 public:
  void Load(std::map<AgentId, CreditAccount> accounts) { accounts_ = std::move(accounts); }
  CreditChanges Apply(std::span<const CreditGrant> grants, Time now);
  const std::map<AgentId, CreditAccount>& accounts() const { return accounts_; }

 private:
  std::map<AgentId, CreditAccount> accounts_;
};

int64_t UtcDay(Time t);

}  // namespace claw

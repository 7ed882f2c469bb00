// Credit statistics: the leaderboard of users and devices from the credit
// accounts, as the coordinator serves them (/stats/credits.json) and in the
// form of BOINC's daily statistics export (db_dump's user and host files),
// so that sites built for BOINC statistics can read ours. Pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/credits.h"

namespace claw {

struct DeviceCredit {
  AgentId id;
  std::string owner;  // empty: unknown
  double total = 0;
  double recent = 0;  // RAC, credit per day
  uint64_t results = 0;
  size_t rank = 0;  // 1: most total credit; ties share a rank
};

struct UserCredit {
  std::string name;
  double total = 0;
  double recent = 0;
  uint64_t results = 0;
  size_t devices = 0;
  size_t rank = 0;
  double percentile = 0;  // share of the other users this one is ahead of or level with, 0..100
};

struct CreditStats {
  std::vector<UserCredit> users;      // by rank
  std::vector<DeviceCredit> devices;  // by rank
  uint64_t ledger_size = 0;
};

// From accounts whose RAC is already decayed to the time of the statistics.
// Devices of no known owner count under the user "" (shown as such).
CreditStats BuildCreditStats(const std::map<AgentId, CreditAccount>& accounts,
                             uint64_t ledger_size);
nlohmann::json CreditStatsJson(const CreditStats& stats);
std::string UsersXml(const CreditStats& stats);
std::string HostsXml(const CreditStats& stats);

}  // namespace claw

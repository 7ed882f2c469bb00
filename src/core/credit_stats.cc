#include "core/credit_stats.h"

#include <algorithm>
#include <cstdio>

#include "common/text.h"

namespace claw {
namespace {

template <typename T>
void Rank(std::vector<T>& rows) {
  std::sort(rows.begin(), rows.end(), [](const T& a, const T& b) {
    return a.total != b.total ? a.total > b.total : a.recent > b.recent;
  });
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].rank = i > 0 && rows[i].total == rows[i - 1].total ? rows[i - 1].rank : i + 1;
  }
}

std::string Fixed(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}

}  // namespace

CreditStats BuildCreditStats(const std::map<AgentId, CreditAccount>& accounts,
                             uint64_t ledger_size) {
  CreditStats out;
  out.ledger_size = ledger_size;
  std::map<std::string, UserCredit> users;
  for (const auto& [id, a] : accounts) {
    out.devices.push_back(DeviceCredit{id, a.owner, a.total, a.recent.average, a.results, 0});
    UserCredit& u = users[a.owner];
    u.name = a.owner;
    u.total += a.total;
    u.recent += a.recent.average;
    u.results += a.results;
    u.devices++;
  }
  for (auto& [name, u] : users) out.users.push_back(std::move(u));
  Rank(out.devices);
  Rank(out.users);
  const size_t n = out.users.size();
  for (UserCredit& u : out.users) {
    u.percentile = n <= 1 ? 100.0 : 100.0 * static_cast<double>(n - u.rank) / static_cast<double>(n - 1);
  }
  return out;
}

nlohmann::json CreditStatsJson(const CreditStats& stats) {
  nlohmann::json users = nlohmann::json::array();
  for (const UserCredit& u : stats.users) {
    users.push_back({{"name", u.name},
                     {"rank", u.rank},
                     {"percentile", u.percentile},
                     {"total_credit", u.total},
                     {"recent_average_credit", u.recent},
                     {"results", u.results},
                     {"devices", u.devices}});
  }
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceCredit& d : stats.devices) {
    devices.push_back({{"id", d.id},
                       {"owner", d.owner},
                       {"rank", d.rank},
                       {"total_credit", d.total},
                       {"recent_average_credit", d.recent},
                       {"results", d.results}});
  }
  return {{"unit", "cobblestone (1/200 day of a 1 GFLOPS device)"},
          {"ledger_size", stats.ledger_size},
          {"users", users},
          {"devices", devices}};
}

std::string UsersXml(const CreditStats& stats) {
  std::string out = "<users>\n";
  for (const UserCredit& u : stats.users) {
    out += " <user>\n  <name>" + XmlEscape(u.name) + "</name>\n  <total_credit>" + Fixed(u.total) +
           "</total_credit>\n  <expavg_credit>" + Fixed(u.recent) + "</expavg_credit>\n  <rank>" +
           std::to_string(u.rank) + "</rank>\n  <devices>" + std::to_string(u.devices) +
           "</devices>\n </user>\n";
  }
  return out + "</users>\n";
}

std::string HostsXml(const CreditStats& stats) {
  std::string out = "<hosts>\n";
  for (const DeviceCredit& d : stats.devices) {
    out += " <host>\n  <id>" + XmlEscape(d.id) + "</id>\n  <userid>" + XmlEscape(d.owner) +
           "</userid>\n  <total_credit>" + Fixed(d.total) + "</total_credit>\n  <expavg_credit>" +
           Fixed(d.recent) + "</expavg_credit>\n </host>\n";
  }
  return out + "</hosts>\n";
}

}  // namespace claw

// The dashboard's views of the coordinator's state (docs/dashboard.md), as
// JSON, and the owner's remote pause / finish / resume of a device.
#include <algorithm>

#include "common/text.h"
#include "coordinator/coordinator.h"
#include "core/credit_stats.h"

namespace claw {
namespace {

bool IsAdminUser(const UserRecord& u) { return u.tier == kAdminTier; }

// A device's state and why it gets no work, from what the coordinator knows:
// its session, what its agent last said of its owner, what it holds.
struct DeviceState {
  const char* state = "offline";
  std::string why;
  std::string control = "none";
};

DeviceState StateOf(bool connected, const v1::AgentStatus* status, const Scheduler::AgentWork& work,
                    std::optional<Time> offline_since) {
  DeviceState d;
  if (!connected) {
    d.why = offline_since ? "offline since " + Iso8601(*offline_since) : "offline";
    return d;
  }
  if (status && !status->control().empty()) d.control = status->control();
  if (d.control == "paused") {
    d.state = "paused";
    d.why = "paused by its owner";
  } else if (d.control == "finishing") {
    d.state = work.leases > 0 ? "working" : "paused";
    d.why = "finishing what it holds, then pausing";
  } else if (status && !status->availability().empty() && status->availability() != "available") {
    d.state = "owner_busy";
    d.why = "its owner is using it" + (status->why().empty() ? "" : ": " + status->why());
  } else if (work.leases > 0) {
    d.state = "working";
  } else {
    d.state = "idle";
    d.why = work.why_no_work;
  }
  return d;
}

}  // namespace

HistorySample Coordinator::NetworkNow() {
  MutexLock lock(mu_);
  HistorySample h;
  h.t = clock_->Now();
  for (const auto& [id, sink] : session_of_) {
    auto st = agent_status_.find(id);
    const Scheduler::AgentWork work = sched_.WorkOf(id, /*explain=*/false);
    const DeviceState d =
        StateOf(true, st == agent_status_.end() ? nullptr : &st->second, work, std::nullopt);
    const std::string_view s = d.state;
    if (s == "working") {
      ++h.working;
    } else if (s == "idle") {
      ++h.idle;
    } else if (s == "paused") {
      ++h.paused;
    } else {
      ++h.owner_busy;
    }
    if (s == "working" || s == "idle") {
      if (auto dev = devices_.find(id); dev != devices_.end()) {
        h.flops += dev->second.flops() * std::max<uint32_t>(1, dev->second.slots());
      }
    }
  }
  const size_t enrolled = enrolled_agents_.load();
  h.offline = static_cast<uint32_t>(enrolled > session_of_.size() ? enrolled - session_of_.size() : 0);
  h.queue = sched_.pending_tasks();
  h.tasks_per_s = static_cast<double>(metrics_.results_accepted);  // the feed makes it a rate
  return h;
}

nlohmann::json Coordinator::NetworkJson(const HistorySample& h) {
  size_t running = 0;
  {
    MutexLock lock(mu_);
    running = sched_.running_jobs();
  }
  return {{"t", h.t.unix_ms()},
          {"devices",
           {{"working", h.working},
            {"idle", h.idle},
            {"owner_busy", h.owner_busy},
            {"paused", h.paused},
            {"offline", h.offline}}},
          {"flops_available", h.flops},
          {"tasks_per_s", h.tasks_per_s},
          {"queue", h.queue},
          {"jobs_running", running}};
}

Result<nlohmann::json> Coordinator::Devices(const UserRecord& caller) {
  auto agents = ListAgents();
  if (!agents.ok()) return agents.status();
  const std::map<AgentId, CreditAccount> credit = CreditAccounts();
  MutexLock lock(mu_);
  nlohmann::json list = nlohmann::json::array();
  for (const v1::AgentInfo& a : *agents) {
    if (!IsAdminUser(caller) && a.owner() != caller.name) continue;
    const bool connected = session_of_.count(a.agent_id()) > 0;
    auto st = agent_status_.find(a.agent_id());
    const Scheduler::AgentWork work = sched_.WorkOf(a.agent_id());
    std::optional<Time> since;
    if (auto o = offline_since_.find(a.agent_id()); o != offline_since_.end()) since = o->second;
    const DeviceState d =
        StateOf(connected, st == agent_status_.end() ? nullptr : &st->second, work, since);
    const v1::DeviceReport& dev = a.device();
    const uint64_t judged = a.valid_results() + a.invalid_results();
    nlohmann::json j = {{"agent_id", a.agent_id()},
                        {"owner", a.owner()},
                        {"hostname", dev.hostname()},
                        {"os", dev.os()},
                        {"arch", dev.arch()},
                        {"cores", dev.cores()},
                        {"memory_bytes", dev.memory_bytes()},
                        {"slots", dev.slots()},
                        {"flops", dev.flops()},
                        {"state", d.state},
                        {"why", d.why},
                        {"control", d.control},
                        {"running", work.leases},
                        {"running_jobs", work.jobs},
                        {"valid_results", a.valid_results()},
                        {"invalid_results", a.invalid_results()},
                        {"success_rate", judged == 0 ? nlohmann::json(nullptr)
                                                     : nlohmann::json(static_cast<double>(a.valid_results()) /
                                                                      static_cast<double>(judged))},
                        {"error_rate", a.error_rate()},
                        {"on_probation", a.on_probation()},
                        {"connected", connected},
                        {"enrolled_unix_ms", a.enrolled_unix_ms()}};
    auto c = credit.find(a.agent_id());
    j["credit"] = c == credit.end() ? 0.0 : c->second.total;
    j["rac"] = c == credit.end() ? 0.0 : c->second.recent.average;
    list.push_back(std::move(j));
  }
  return nlohmann::json{{"devices", std::move(list)}};
}

Result<nlohmann::json> Coordinator::Me(const UserRecord& caller) {
  UserRecord own = caller;
  own.tier = "";  // only the caller's devices, even for an admin
  auto devices = Devices(own);
  if (!devices.ok()) return devices.status();
  uint64_t valid = 0, returned = 0;
  for (const auto& d : (*devices)["devices"]) {
    valid += d["valid_results"].get<uint64_t>();
    returned += d["valid_results"].get<uint64_t>() + d["invalid_results"].get<uint64_t>();
  }
  const CreditStats stats = BuildCreditStats(CreditAccounts(), ledger_->size());
  nlohmann::json credit = {{"total", 0.0}, {"rac", 0.0},    {"rank", nullptr},     {"users", stats.users.size()},
                           {"percentile", nullptr}, {"results", 0}, {"validated", valid}, {"returned", returned}};
  // No credit yet: ranked after everyone who has some.
  credit["rank"] = stats.users.size() + 1;
  credit["users"] = stats.users.size() + 1;
  credit["percentile"] = 0.0;
  for (const UserCredit& u : stats.users) {
    if (u.name != caller.name) continue;
    credit["users"] = stats.users.size();
    credit["total"] = u.total;
    credit["rac"] = u.recent;
    credit["rank"] = u.rank;
    credit["percentile"] = u.percentile;
    credit["results"] = u.results;
    // Validated: accepted as valid, by a vote or on a trusted device's word
    // (and credited); returned: those and the ones that lost a vote.
    const uint64_t invalid = returned - valid;
    credit["validated"] = std::max<uint64_t>(valid, u.results);
    credit["returned"] = std::max<uint64_t>(valid, u.results) + invalid;
  }
  constexpr int kDays = 30;
  auto days = CreditHistory(kDays);
  if (!days.ok()) return days.status();
  std::map<int64_t, double> per_day;
  const int64_t today = UtcDay(clock_->Now());
  for (int64_t d = today - kDays + 1; d <= today; ++d) per_day[d] = 0;
  for (const CreditDay& d : *days) {
    if (d.owner == caller.name) per_day[d.day] += d.credit;
  }
  nlohmann::json credit_days = nlohmann::json::array();
  for (const auto& [day, c] : per_day) credit_days.push_back({day * 86'400'000, c});
  nlohmann::json usage = nullptr;
  for (const UserUsage& u : Usage(caller)) {
    if (u.user != caller.name) continue;
    usage = {{"month", MonthText(UsageMonth())},
             {"used_node_hours", u.used_hours},
             {"quota_node_hours", u.limit_hours < 0 ? nlohmann::json(nullptr) : nlohmann::json(u.limit_hours)},
             {"held", u.held}};
  }
  return nlohmann::json{{"user", caller.name},
                        {"tier", caller.tier},
                        {"admin", IsAdminUser(caller)},
                        {"devices", std::move((*devices)["devices"])},
                        {"credit", std::move(credit)},
                        {"credit_days", std::move(credit_days)},
                        {"usage", std::move(usage)}};
}

Result<nlohmann::json> Coordinator::JobPage(const JobId& id, const UserRecord& caller) {
  auto info = GetJob(id, caller);
  if (!info.ok()) return info.status();
  nlohmann::json page = {{"job", JobInfoToJson(*info)}};
  {
    MutexLock lock(mu_);
    size_t dropped = 0;
    nlohmann::json spans = nlohmann::json::array();
    // The page shows the latest spans: a job's first thousand tasks are
    // history once it is far past them, and each update carries them all.
    constexpr size_t kShown = 1000;
    std::vector<TaskTimeline::Span> all = timeline_.Of(id, &dropped);
    const size_t skip = all.size() > kShown ? all.size() - kShown : 0;
    dropped += skip;
    for (size_t i = skip; i < all.size(); ++i) {
      const TaskTimeline::Span& s = all[i];
      auto dev = devices_.find(s.agent);
      spans.push_back({{"task", s.task},
                       {"attempt", s.attempt},
                       {"agent", s.agent},
                       {"hostname", dev == devices_.end() ? "" : dev->second.hostname()},
                       {"lease", s.lease},
                       {"start_ms", s.start.unix_ms()},
                       {"end_ms", s.end.us == 0 ? nlohmann::json(nullptr) : nlohmann::json(s.end.unix_ms())},
                       {"outcome", s.outcome},
                       {"detail", s.detail}});
    }
    page["timeline"] = std::move(spans);
    page["timeline_truncated"] = dropped > 0;
    page["timeline_not_shown"] = dropped;
  }
  page["result"] = nullptr;
  if (info->state() != "running") {
    auto r = GetResults(id, caller);
    // A large result is not sent on every update: the page fetches it once
    // (GET /api/jobs/{id}/results).
    constexpr size_t kMaxInline = 512 * 1024;
    if (r.ok() && r->second.size() > kMaxInline) {
      page["result_omitted"] = true;
    } else if (r.ok() && !r->second.empty()) {
      auto result = nlohmann::json::parse(r->second, nullptr, false);
      if (!result.is_discarded()) page["result"] = std::move(result);
    }
  }
  nlohmann::json rounds = nlohmann::json::array();
  const App* app = apps_->Find(info->app());
  if (app && app->Driven()) {
    if (auto r = TrainingRounds(id, caller); r.ok()) {
      for (const RoundRecord& rec : r->second) {
        nlohmann::json ri = nlohmann::json::parse(rec.info_json, nullptr, false);
        if (!ri.is_object()) ri = nlohmann::json::object();
        ri["round"] = rec.round;
        ri["finished_unix_ms"] = rec.finished.unix_ms();
        rounds.push_back(std::move(ri));
      }
    }
  }
  page["rounds"] = std::move(rounds);
  return page;
}

bool Coordinator::IsAdmin(const std::string& user) {
  auto users = store_->ListUsers();
  if (!users.ok()) return false;
  for (const UserRecord& u : *users) {
    if (u.name == user) return u.tier == kAdminTier;
  }
  return false;
}

Result<nlohmann::json> Coordinator::ControlDevice(const AgentId& agent, const std::string& action,
                                                  const UserRecord& caller) {
  if (action != "pause" && action != "finish" && action != "resume") {
    return InvalidArgument("action: \"pause\", \"finish\" or \"resume\", not \"" +
                           EscapeControl(action.substr(0, 32)) + "\"");
  }
  {
    MutexLock lock(mu_);
    std::string owner;
    if (auto o = agent_owners_.find(agent); o != agent_owners_.end()) {
      owner = o->second;
    } else if (auto rec = store_->GetAgent(agent); rec.ok()) {
      owner = rec->owner;
    } else {
      return NotFound("no device " + EscapeControl(agent.substr(0, 64)));
    }
    if (owner != caller.name && !IsAdminUser(caller)) {
      return PermissionDenied("device " + agent + " is not yours");
    }
    auto s = session_of_.find(agent);
    if (s == session_of_.end()) {
      return FailedPrecondition("device " + agent +
                                " is offline: pause or resume it on the device (claw agent " +
                                action + ") or when it is back");
    }
    v1::CoordinatorMessage m;
    m.set_owner_control(action);
    s->second->Send(m);
    metrics_.session_sends++;
    log_->info("device control agent={} action={} by={}", agent, action, caller.name);
  }
  auto devices = Devices(caller);
  if (!devices.ok()) return devices.status();
  for (auto& d : (*devices)["devices"]) {
    if (d["agent_id"] == agent) return d;
  }
  return NotFound("no device " + agent);
}

}  // namespace claw

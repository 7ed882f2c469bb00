#include "coordinator/dashboard_feed.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>

namespace claw {
namespace {

constexpr size_t kMaxRows = 2000;  // history rows in one event

nlohmann::json SampleRow(const HistorySample& h) {
  return nlohmann::json::array({h.t.unix_ms(), h.working, h.idle, h.owner_busy, h.paused, h.offline,
                                h.flops, h.tasks_per_s, h.queue});
}

std::string EventId(size_t hash, int64_t sample_ms) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%zx.%lld", hash, static_cast<long long>(sample_ms));
  return buf;
}

// "<hash hex>.<sample ms>" -> both; anything else -> nothing (a fresh start).
bool ParseEventId(const std::string& id, size_t* hash, int64_t* sample_ms) {
  const size_t dot = id.find('.');
  if (id.empty() || id.size() > 40 || dot == std::string::npos) return false;
  char* end = nullptr;
  const unsigned long long h = std::strtoull(id.c_str(), &end, 16);
  if (end != id.c_str() + dot) return false;
  const long long ms = std::strtoll(id.c_str() + dot + 1, &end, 10);
  if (*end != '\0' || ms < 0) return false;
  *hash = static_cast<size_t>(h);
  *sample_ms = ms;
  return true;
}

std::string Event(const char* type, const std::string& id, const std::string& data) {
  std::string out;
  out.reserve(data.size() + id.size() + 32);
  if (!id.empty()) out += "id: " + id + "\n";
  out += "event: ";
  out += type;
  out += "\ndata: ";
  out += data;  // JSON as dump() writes it: one line
  out += "\n\n";
  return out;
}

}  // namespace

DashboardFeed::DashboardFeed(Coordinator* coordinator, const Clock* clock, Options options, Logger log)
    : coordinator_(coordinator), clock_(clock), options_(options), log_(std::move(log)) {}

DashboardFeed::~DashboardFeed() { Stop(); }

Status DashboardFeed::Start() {
  const Time now = clock_->Now();
  auto history = coordinator_->History(now - options_.chart_window);
  if (!history.ok()) return history.status();
  {
    MutexLock lock(mu_);
    recent_.assign(history->begin(), history->end());
    next_sample_ = now;
  }
  thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void DashboardFeed::Stop() {
  std::vector<std::shared_ptr<Sub>> subs;
  {
    MutexLock lock(mu_);
    if (stop_) return;
    stop_ = true;
    subs.swap(subs_);
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& s : subs) s->stream->Close();
}

size_t DashboardFeed::open_streams() {
  MutexLock lock(mu_);
  return subs_.size();
}

HistorySample DashboardFeed::Current(Time now) {
  HistorySample h = coordinator_->NetworkNow();
  const double accepted = h.tasks_per_s;  // NetworkNow gives the count
  MutexLock lock(mu_);
  accepted_.emplace_back(now, accepted);
  while (accepted_.size() > 2 && now - accepted_.front().first > std::chrono::seconds(10)) {
    accepted_.pop_front();
  }
  const auto& [t0, n0] = accepted_.front();
  const double dt = std::chrono::duration<double>(now - t0).count();
  h.tasks_per_s = dt > 0 ? (accepted - n0) / dt : 0;
  return h;
}

void DashboardFeed::Sample(Time now) {
  HistorySample h = Current(now);
  h.t = now;
  Status st = coordinator_->AddHistory(h, now - options_.retention);
  if (!st.ok()) log_->warn("dashboard history not stored: {}", st.message());
  MutexLock lock(mu_);
  recent_.push_back(h);
  while (!recent_.empty() && recent_.front().t < now - options_.chart_window) recent_.pop_front();
}

std::string DashboardFeed::KeyOf(const Sub& s) const {
  if (s.page == "network" || s.page == "ledger") return s.page;
  // An admin's jobs and devices are everyone's: one key for all admins.
  const std::string who = s.page != "me" && s.caller.tier == kAdminTier ? "*" : s.caller.name;
  return s.page + "|" + s.job + "|" + who;
}

DashboardFeed::Computed DashboardFeed::Compute(const Sub& s, const HistorySample& now_sample) {
  Computed c;
  nlohmann::json state;
  if (s.page == "network") {
    state = {{"now", coordinator_->NetworkJson(now_sample)},
             {"history_columns",
              {"t", "working", "idle", "owner_busy", "paused", "offline", "flops_available",
               "tasks_per_s", "queue"}},
             {"history_interval_s", std::chrono::duration<double>(options_.sample_every).count()}};
    // The hash leaves out the time of "now": an unchanged network sends nothing.
    nlohmann::json key = state;
    key["now"].erase("t");
    c.hash = std::hash<std::string>{}(key.dump());
    c.json = state.dump();
    return c;
  }
  Result<nlohmann::json> r = InvalidArgument("page");
  if (s.page == "jobs") {
    nlohmann::json jobs = nlohmann::json::array();
    for (const auto& j : coordinator_->ListJobs(500, s.caller)) jobs.push_back(JobInfoToJson(j));
    r = nlohmann::json{{"jobs", std::move(jobs)}};
  } else if (s.page == "devices") {
    r = coordinator_->Devices(s.caller);
  } else if (s.page == "me") {
    r = coordinator_->Me(s.caller);
  } else if (s.page == "job") {
    r = coordinator_->JobPage(s.job, s.caller);
  } else if (s.page == "ledger") {
    const ledger::Ledger& log = coordinator_->ledger();
    r = nlohmann::json{{"checkpoint", log.SignedCheckpoint()}, {"size", log.size()},
                       {"key", log.verifier_key()}};
  }
  if (!r.ok()) {
    c.status = r.status();
    return c;
  }
  c.json = r->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  c.hash = std::hash<std::string>{}(c.json);
  return c;
}

bool DashboardFeed::Send(Sub& s, const Computed& c, Time now) {
  if (!c.status.ok()) {
    nlohmann::json err = {{"error", {{"code", StatusCodeName(c.status.code())}, {"message", c.status.message()}}}};
    s.stream->Push(Event("error", "", err.dump()));
    s.stream->Close();
    return true;
  }
  std::string data;
  int64_t newest = s.last_sample_ms;
  if (s.page == "network") {
    nlohmann::json rows = nlohmann::json::array();
    const bool full = !s.sent && s.last_sample_ms == 0;
    {
      MutexLock lock(mu_);
      // A chart is a few hundred pixels wide: at most kMaxRows samples go
      // at once (every n-th, and always the newest).
      size_t n = 0;
      for (const HistorySample& h : recent_) n += h.t.unix_ms() > s.last_sample_ms ? 1 : 0;
      const size_t every = (n + kMaxRows - 1) / kMaxRows;
      size_t i = 0;
      for (const HistorySample& h : recent_) {
        if (h.t.unix_ms() <= s.last_sample_ms) continue;
        if (++i % every == 0 || i == n) rows.push_back(SampleRow(h));
        newest = h.t.unix_ms();
      }
    }
    if (s.sent && c.hash == s.last_hash && rows.empty()) return false;
    // Spliced rather than parsed again: `c.json` is an object.
    data = c.json.substr(0, c.json.size() - 1) + ",\"history\":" + rows.dump() +
           ",\"full_history\":" + (full ? "true" : "false") + "}";
  } else {
    if (s.sent && c.hash == s.last_hash) return false;
    data = c.json;
  }
  s.last_hash = c.hash;
  s.last_sample_ms = newest;
  s.sent = true;
  s.last_write = now;
  std::string event = Event("state", EventId(c.hash, newest), data);
  if (s.first) {  // how long a client waits before reconnecting, with the first event
    event.insert(0, "retry: 2000\n");
    s.first = false;
  }
  s.stream->Push(event);
  return true;
}

Result<std::shared_ptr<HttpStream>> DashboardFeed::Open(const std::string& page, const std::string& job,
                                                        const UserRecord& caller,
                                                        const std::string& last_event_id) {
  if (std::find(std::begin(kPages), std::end(kPages), page) == std::end(kPages)) {
    return InvalidArgument("page: one of network, jobs, devices, me, job, ledger");
  }
  if (page == "job" && job.empty()) return InvalidArgument("job: required for page=job");
  auto sub = std::make_shared<Sub>();
  sub->page = page;
  sub->job = page == "job" ? job : "";
  sub->caller = caller;
  size_t hash = 0;
  int64_t sample_ms = 0;
  if (ParseEventId(last_event_id, &hash, &sample_ms)) {
    sub->last_hash = hash;
    sub->last_sample_ms = sample_ms;
    sub->sent = true;  // the client shows that state: only what changed since
  }
  const Time now = clock_->Now();
  const HistorySample current = page == "network" ? Current(now) : HistorySample{};
  Computed c = Compute(*sub, current);
  if (!c.status.ok()) return c.status;  // e.g. another user's job: a plain error, no stream
  {
    MutexLock lock(mu_);
    if (subs_.size() >= options_.max_streams) {
      return ResourceExhausted("too many dashboard streams open (" + std::to_string(subs_.size()) + ")");
    }
    const size_t mine = std::count_if(subs_.begin(), subs_.end(), [&](const std::shared_ptr<Sub>& o) {
      return o->caller.name == caller.name && !o->stream->closed();
    });
    if (mine >= options_.max_streams_per_user) {
      return ResourceExhausted("you have " + std::to_string(mine) +
                               " dashboard pages open already; close one first");
    }
  }
  sub->stream = std::make_shared<HttpStream>(options_.buffer);
  sub->last_write = now;
  if (!Send(*sub, c, now)) sub->stream->Push("retry: 2000\n\n");  // resumed: nothing new yet
  sub->first = false;
  MutexLock lock(mu_);
  if (stop_) return Unavailable("the dashboard feed is stopping");
  subs_.push_back(sub);
  return sub->stream;
}

void DashboardFeed::Loop() {
  MutexLock lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, options_.interval);
    if (stop_) break;
    std::erase_if(subs_, [this](const std::shared_ptr<Sub>& s) {
      if (!s->stream->closed()) return false;
      if (s->stream->overflowed()) {
        cut_++;
        log_->info("dashboard stream cut: its client did not read (page={} user={})", s->page,
                   s->caller.name);
      }
      return true;
    });
    std::vector<std::shared_ptr<Sub>> subs = subs_;
    const Time now = clock_->Now();
    const bool sample = now >= next_sample_;
    if (sample) next_sample_ = now + options_.sample_every;
    lock.unlock();
    if (sample) Sample(now);
    HistorySample current;
    bool have_current = false;
    std::map<std::string, Computed> computed;  // one computation per key this tick
    std::map<std::string, bool> still_admin;     // a stream keeps an admin's view only while they are one
    for (auto& s : subs) {
      if (s->caller.tier == kAdminTier && s->caller.name != LocalUser().name) {
        auto a = still_admin.find(s->caller.name);
        if (a == still_admin.end()) {
          a = still_admin.emplace(s->caller.name, coordinator_->IsAdmin(s->caller.name)).first;
        }
        if (!a->second) {
          s->stream->Close();
          continue;
        }
      }
      if (s->page == "network" && !have_current) {
        current = Current(now);
        have_current = true;
      }
      const std::string key = KeyOf(*s);
      auto it = computed.find(key);
      if (it == computed.end()) it = computed.emplace(key, Compute(*s, current)).first;
      if (!Send(*s, it->second, now) && now - s->last_write >= options_.keepalive) {
        s->stream->Push(": keepalive\n\n");
        s->last_write = now;
      }
    }
    lock.lock();
  }
}

}  // namespace claw

#include "coordinator/http_api.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "coordinator/http_json.h"
#include "core/job_spec.h"

namespace claw {
Result<std::unique_ptr<HttpApi>> HttpApi::Start(Coordinator* coordinator, const Options& options,
                                                Logger log) {
  std::unique_ptr<HttpApi> api(new HttpApi(coordinator, options.insecure_local));
  HttpServer::Options so;
  so.host = options.host;
  so.port = options.port;
  so.cert_pem = options.cert_pem;
  so.key_pem = options.key_pem;
  so.max_per_address = options.max_per_address;
  so.header_deadline = options.header_deadline;
  so.max_body_bytes = kMaxSpecBytes + 1024;
  api->feed_ = std::make_unique<DashboardFeed>(coordinator, coordinator->clock(), options.dashboard, log);
  CLAW_RETURN_IF_ERROR(api->feed_->Start());
  auto server = HttpServer::Start(
      so, [a = api.get()](const HttpRequest& req) { return a->Route(req); }, std::move(log));
  if (!server.ok()) return server.status();
  api->server_ = std::move(server).value();
  return api;
}

Result<UserRecord> HttpApi::Caller(const HttpRequest& req) const {
  if (insecure_local_) return LocalUser();
  std::string value = req.Header("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (std::string_view(value).substr(0, kBearer.size()) != kBearer) {
    return Unauthenticated("an API token is required: Authorization: Bearer <token>");
  }
  return coordinator_->Authenticate(std::string_view(value).substr(kBearer.size()));
}

HttpResponse HttpApi::Route(const HttpRequest& req) {
  std::vector<std::string> seg = Segments(req.path);
  if ((req.method == "GET" || req.method == "HEAD") && (seg.empty() || seg[0] == "ui")) {
    return Asset(req.path);
  }
  if (req.method == "GET" && seg.size() == 1 && seg[0] == "metrics") return Metrics();
  // Open to anyone: the ledger and the credit statistics built on it.
  if (req.method == "GET" && !seg.empty() && seg[0] == "ledger") return Ledger(req, seg);
  if (req.method == "GET" && !seg.empty() && seg[0] == "stats") return Stats(req, seg);
  if (!seg.empty() && seg[0] == "api") {
    auto caller = Caller(req);
    if (!caller.ok()) return Error(caller.status());
    if (seg.size() >= 2 && seg[1] == "jobs") return Jobs(req, *caller);
    if (req.method == "GET" && seg.size() == 2 && seg[1] == "agents") {
      auto agents = coordinator_->ListAgents();
      if (!agents.ok()) return Error(agents.status());
      nlohmann::json list = nlohmann::json::array();
      for (const auto& a : *agents) list.push_back(AgentInfoToJson(a));
      return Json(200, {{"agents", list}});
    }
    if (req.method == "GET" && seg.size() == 3 && seg[1] == "blobs") return Blob(seg[2], *caller);
    if (seg.size() >= 2 && (seg[1] == "usage" || seg[1] == "users")) return Users(req, seg, *caller);
    if (seg.size() >= 2 && seg[1] == "notifications") return Notifications(req, seg, *caller);
    if (seg.size() >= 2 && (seg[1] == "stream" || seg[1] == "whoami" || seg[1] == "devices")) {
      return Dashboard(req, seg, *caller);
    }
  }
  return Error(NotFound("no route " + req.method + " " + req.path.substr(0, 200)));
}

HttpResponse HttpApi::Jobs(const HttpRequest& req, const UserRecord& caller) {
  std::vector<std::string> seg = Segments(req.path);
  if (seg.size() == 2 && req.method == "POST") {
    auto id = coordinator_->Submit(req.body, caller);
    if (!id.ok()) return Error(id.status());
    auto info = coordinator_->GetJob(*id, caller);
    return Json(201, info.ok() ? JobInfoToJson(*info) : nlohmann::json{{"job_id", *id}});
  }
  if (seg.size() == 2 && req.method == "GET") {
    size_t limit = 100;
    if (std::string l = req.Query("limit"); !l.empty()) {
      char* end = nullptr;
      unsigned long long n = std::strtoull(l.c_str(), &end, 10);
      if (end == l.c_str() || *end != '\0' || n == 0) {
        return Error(InvalidArgument("limit: must be a positive integer"));
      }
      limit = static_cast<size_t>(std::min<unsigned long long>(n, 10'000));
    }
    nlohmann::json jobs = nlohmann::json::array();
    for (const auto& j : coordinator_->ListJobs(limit, caller)) jobs.push_back(JobInfoToJson(j));
    return Json(200, {{"jobs", jobs}});
  }
  if (seg.size() == 3 && req.method == "GET") {
    auto info = coordinator_->GetJob(seg[2], caller);
    if (!info.ok()) return Error(info.status());
    return Json(200, JobInfoToJson(*info));
  }
  if (seg.size() == 4 && req.method == "POST" && seg[3] == "cancel") {
    auto info = coordinator_->Cancel(seg[2], caller);
    if (!info.ok()) return Error(info.status());
    return Json(200, JobInfoToJson(*info));
  }
  if (seg.size() == 4 && req.method == "GET" && seg[3] == "results") {
    auto r = coordinator_->GetResults(seg[2], caller);
    if (!r.ok()) return Error(r.status());
    nlohmann::json result = r->second.empty() ? nlohmann::json(nullptr)
                                              : nlohmann::json::parse(r->second, nullptr, false);
    return Json(200, {{"job", JobInfoToJson(r->first)}, {"result", result}});
  }
  if (seg.size() == 4 && req.method == "GET" && seg[3] == "rounds") {
    auto r = coordinator_->TrainingRounds(seg[2], caller);
    if (!r.ok()) return Error(r.status());
    nlohmann::json rounds = nlohmann::json::array();
    for (const RoundRecord& rec : r->second) {
      nlohmann::json info = nlohmann::json::parse(rec.info_json, nullptr, false);
      if (!info.is_object()) info = nlohmann::json::object();
      info["round"] = rec.round;
      info["model"] = rec.model;
      info["finished_unix_ms"] = rec.finished.unix_ms();
      if (!rec.update.empty()) info["update"] = rec.update;
      rounds.push_back(std::move(info));
    }
    return Json(200, {{"job", JobInfoToJson(r->first)}, {"rounds", rounds}});
  }
  return Error(NotFound("no route " + req.method + " " + req.path.substr(0, 200)));
}

// A blob's bytes, for its owners (as BlobService.GetBlob), sent from its
// file. The ETag is its SHA-256: check what you received against it.
HttpResponse HttpApi::Blob(const std::string& hash, const UserRecord& caller) {
  if (!IsBlobHash(hash)) return Error(InvalidArgument("not a blob name (64 lowercase hex digits)"));
  Status may = coordinator_->MayReadBlob(hash, caller);
  if (!may.ok()) return Error(may);
  auto size = coordinator_->blobs()->Size(hash);
  if (!size.ok()) return Error(size.status());
  int fd = open(coordinator_->blobs()->PathOf(hash).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error(NotFound("no blob " + hash));
  HttpResponse r{200, "application/octet-stream", ""};
  r.file_fd = fd;
  r.file_size = *size;
  r.headers["ETag"] = "\"" + hash + "\"";
  return r;
}

HttpResponse HttpApi::Metrics() {
  CoordinatorMetrics m = coordinator_->Metrics();
  std::string out;
  char value[64];
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    std::snprintf(value, sizeof value, " %.17g\n", v);
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
           name + value;
  };
  metric("claw_jobs_submitted_total", "counter", "Jobs accepted since the coordinator started.",
         m.jobs_submitted);
  metric("claw_results_accepted_total", "counter", "Results that arrived on an active lease.",
         m.results_accepted);
  metric("claw_results_stale_total", "counter",
         "Results for a lease no longer active (duplicates, late replicas).", m.results_stale);
  metric("claw_results_valid_total", "counter", "Results that agreed with their task's canonical one.",
         m.results_valid);
  metric("claw_results_invalid_total", "counter", "Results that lost their task's vote.",
         m.results_invalid);
  metric("claw_task_failures_total", "counter", "Tasks that failed on an agent.", m.task_failures);
  metric("claw_assignments_sent_total", "counter", "Tasks handed to agents.", m.assignments_sent);
  metric("claw_store_commits_total", "counter", "Transactions committed to the store.",
         m.store_commits);
  metric("claw_agent_messages_total", "counter", "Messages received on agent sessions.",
         m.agent_messages);
  metric("claw_session_sends_total", "counter", "Messages sent to agents.", m.session_sends);
  metric("claw_blob_bytes_to_agents_total", "counter", "File bytes agents downloaded.",
         m.blob_bytes_to_agents);
  metric("claw_blob_bytes_from_agents_total", "counter", "File bytes agents uploaded.",
         m.blob_bytes_from_agents);
  metric("claw_credits_granted_total", "counter",
         "Credit granted to contributors (cobblestones), net of credit taken back.",
         m.credits_granted);
  metric("claw_ledger_entries", "gauge", "Entries in the open ledger.",
         static_cast<double>(m.ledger_entries));
  metric("claw_pending_tasks", "gauge", "Task replicas waiting for an agent.", m.pending_tasks);
  metric("claw_active_leases", "gauge", "Tasks out on agents now.", m.active_leases);
  metric("claw_connected_agents", "gauge", "Agents with an open session.", m.connected_agents);
  metric("claw_users_held", "gauge", "Users over their tier's quota this month (their jobs held).",
         m.users_held);
  out += "# HELP claw_devices Enrolled devices by state.\n# TYPE claw_devices gauge\n";
  const std::pair<const char*, size_t> states[] = {
      {"working", m.agents_working},
      {"idle", m.agents_idle},
      {"offline", m.agents_enrolled > m.connected_agents ? m.agents_enrolled - m.connected_agents : 0}};
  for (const auto& [state, n] : states) {
    out += std::string("claw_devices{state=\"") + state + "\"} " + std::to_string(n) + "\n";
  }
  metric("claw_dashboard_streams", "gauge", "Dashboard pages open (live streams).",
         static_cast<double>(feed_->open_streams()));
  metric("claw_dashboard_streams_cut_total", "counter",
         "Dashboard streams cut because their client did not read what was sent.",
         static_cast<double>(feed_->streams_cut()));
  out += m.histograms.task_run.Exposition("claw_task_run_seconds",
                                          "Run time of tasks as their workers measured it.");
  out += m.histograms.queue_wait.Exposition(
      "claw_queue_wait_seconds", "From a job's submission to its task's first lease.");
  out += m.histograms.round_trip.Exposition(
      "claw_task_round_trip_seconds", "From a lease granted to its result received.");
  return HttpResponse{200, "text/plain; version=0.0.4", out};
}

}  // namespace claw

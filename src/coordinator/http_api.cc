#include "coordinator/http_api.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "coordinator/dashboard.h"
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
  if (req.method == "GET" && seg.empty()) {
    return HttpResponse{200, "text/html; charset=utf-8", kDashboardHtml};
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
  auto line = [&](const char* name, const char* type, double v) {
    out += std::string("# TYPE ") + name + " " + type + "\n" + name + " " + std::to_string(v) + "\n";
  };
  line("claw_jobs_submitted_total", "counter", m.jobs_submitted);
  line("claw_results_accepted_total", "counter", m.results_accepted);
  line("claw_results_stale_total", "counter", m.results_stale);
  line("claw_results_valid_total", "counter", m.results_valid);
  line("claw_results_invalid_total", "counter", m.results_invalid);
  line("claw_task_failures_total", "counter", m.task_failures);
  line("claw_assignments_sent_total", "counter", m.assignments_sent);
  line("claw_store_commits_total", "counter", m.store_commits);
  line("claw_agent_messages_total", "counter", m.agent_messages);
  line("claw_session_sends_total", "counter", m.session_sends);
  line("claw_blob_bytes_to_agents_total", "counter", m.blob_bytes_to_agents);
  line("claw_blob_bytes_from_agents_total", "counter", m.blob_bytes_from_agents);
  line("claw_pending_tasks", "gauge", m.pending_tasks);
  line("claw_active_leases", "gauge", m.active_leases);
  line("claw_connected_agents", "gauge", m.connected_agents);
  return HttpResponse{200, "text/plain; version=0.0.4", out};
}

}  // namespace claw

#include "coordinator/http_api.h"

#include <httplib.h>

#include <fstream>
#include <memory>

#include "coordinator/dashboard.h"
#include "core/job_spec.h"

namespace claw {
namespace {

int HttpCode(StatusCode c) {
  switch (c) {
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kResourceExhausted:
      return 413;
    case StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

void Reply(httplib::Response& res, int code, const nlohmann::json& body) {
  res.status = code;
  res.set_content(body.dump(2) + "\n", "application/json");
}

void ReplyError(httplib::Response& res, const Status& st) {
  Reply(res, HttpCode(st.code()),
        {{"error", {{"code", StatusCodeName(st.code())}, {"message", st.message()}}}});
}

}  // namespace

HttpApi::HttpApi(Coordinator* coordinator, bool insecure_local, const std::string& cert_file,
                 const std::string& key_file)
    : coordinator_(coordinator),
      insecure_local_(insecure_local),
      server_(cert_file.empty()
                  ? std::make_unique<httplib::Server>()
                  : std::make_unique<httplib::SSLServer>(cert_file.c_str(), key_file.c_str())) {}

Result<UserRecord> HttpApi::Caller(const httplib::Request& req) const {
  if (insecure_local_) return LocalUser();
  std::string value = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (std::string_view(value).substr(0, kBearer.size()) != kBearer) {
    return Unauthenticated("an API token is required: Authorization: Bearer <token>");
  }
  return coordinator_->Authenticate(std::string_view(value).substr(kBearer.size()));
}

HttpApi::~HttpApi() { Stop(); }

void HttpApi::Routes() {
  httplib::Server& s = *server_;
  s.set_payload_max_length(kMaxSpecBytes + 1024);
  // An /api handler that runs as the request's caller, or answers 401.
  auto authed = [this](auto body) {
    return [this, body](const httplib::Request& req, httplib::Response& res) {
      auto caller = Caller(req);
      if (!caller.ok()) return ReplyError(res, caller.status());
      body(req, res, *caller);
    };
  };
  s.Post("/api/jobs", authed([this](const httplib::Request& req, httplib::Response& res,
                                    const UserRecord& caller) {
           auto id = coordinator_->Submit(req.body, caller);
           if (!id.ok()) return ReplyError(res, id.status());
           auto info = coordinator_->GetJob(*id, caller);
           Reply(res, 201, info.ok() ? JobInfoToJson(*info) : nlohmann::json{{"job_id", *id}});
         }));
  s.Get("/api/jobs", authed([this](const httplib::Request& req, httplib::Response& res,
                                   const UserRecord& caller) {
          size_t limit = 100;
          if (req.has_param("limit")) {
            try {
              limit = std::clamp<size_t>(std::stoul(req.get_param_value("limit")), 1, 10'000);
            } catch (...) {
              return ReplyError(res, InvalidArgument("limit: must be a positive integer"));
            }
          }
          nlohmann::json jobs = nlohmann::json::array();
          for (const auto& j : coordinator_->ListJobs(limit, caller))
            jobs.push_back(JobInfoToJson(j));
          Reply(res, 200, {{"jobs", jobs}});
        }));
  s.Get("/api/agents", authed([this](const httplib::Request& req, httplib::Response& res,
                                     const UserRecord& caller) {
          auto agents = coordinator_->ListAgents();
          if (!agents.ok()) return ReplyError(res, agents.status());
          nlohmann::json list = nlohmann::json::array();
          for (const auto& a : *agents) list.push_back(AgentInfoToJson(a));
          Reply(res, 200, {{"agents", list}});
        }));
  s.Get(R"(/api/jobs/([^/]+))", authed([this](const httplib::Request& req, httplib::Response& res,
                                              const UserRecord& caller) {
          auto info = coordinator_->GetJob(req.matches[1], caller);
          if (!info.ok()) return ReplyError(res, info.status());
          Reply(res, 200, JobInfoToJson(*info));
        }));
  s.Post(
      R"(/api/jobs/([^/]+)/cancel)",
      authed([this](const httplib::Request& req, httplib::Response& res, const UserRecord& caller) {
        auto info = coordinator_->Cancel(req.matches[1], caller);
        if (!info.ok()) return ReplyError(res, info.status());
        Reply(res, 200, JobInfoToJson(*info));
      }));
  s.Get(
      R"(/api/jobs/([^/]+)/results)",
      authed([this](const httplib::Request& req, httplib::Response& res, const UserRecord& caller) {
        auto r = coordinator_->GetResults(req.matches[1], caller);
        if (!r.ok()) return ReplyError(res, r.status());
        nlohmann::json result = r->second.empty()
                                    ? nlohmann::json(nullptr)
                                    : nlohmann::json::parse(r->second, nullptr, false);
        Reply(res, 200, {{"job", JobInfoToJson(r->first)}, {"result", result}});
      }));
  // A blob's bytes, for its owners (as BlobService.GetBlob). The ETag is its
  // SHA-256: check what you received against it.
  s.Get(R"(/api/blobs/([0-9a-f]{64}))",
        authed([this](const httplib::Request& req, httplib::Response& res,
                       const UserRecord& caller) {
          std::string hash = req.matches[1];
          Status may = coordinator_->MayReadBlob(hash, caller);
          if (!may.ok()) return ReplyError(res, may);
          auto size = coordinator_->blobs()->Size(hash);
          if (!size.ok()) return ReplyError(res, size.status());
          auto file = std::make_shared<std::ifstream>(coordinator_->blobs()->PathOf(hash),
                                                      std::ios::binary);
          res.set_header("ETag", "\"" + hash + "\"");
          res.set_content_provider(
              *size, "application/octet-stream",
              [file](size_t offset, size_t length, httplib::DataSink& sink) {
                std::string buf(std::min<size_t>(length, kBlobChunkBytes), '\0');
                file->seekg(static_cast<std::streamoff>(offset));
                file->read(buf.data(), static_cast<std::streamsize>(buf.size()));
                if (file->gcount() <= 0) return false;
                return sink.write(buf.data(), static_cast<size_t>(file->gcount()));
              });
        }));
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    CoordinatorMetrics m = coordinator_->Metrics();
    std::string out;
    auto line = [&](const char* name, const char* type, double v) {
      out +=
          std::string("# TYPE ") + name + " " + type + "\n" + name + " " + std::to_string(v) + "\n";
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
    line("claw_pending_tasks", "gauge", m.pending_tasks);
    line("claw_active_leases", "gauge", m.active_leases);
    line("claw_connected_agents", "gauge", m.connected_agents);
    res.set_content(out, "text/plain; version=0.0.4");
  });
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kDashboardHtml, "text/html; charset=utf-8");
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
      ReplyError(res, NotFound("no route " + req.method + " " + req.path));
    } else if (res.status == 413) {
      ReplyError(res, ResourceExhausted("request body larger than " +
                                        std::to_string(kMaxSpecBytes) + " bytes"));
    }
  });
}

Result<int> HttpApi::Start(const std::string& host, int port) {
  if (!server_->is_valid()) return Internal("HTTPS: cannot load the server certificate or key");
  Routes();
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a
  // second coordinator bound the port too and got half the connections.
  server_->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  int bound =
      port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    return FailedPrecondition("port " + std::to_string(port) + " on " + host +
                              " is in use (another coordinator, or another program): choose "
                              "another with --port / --http-port");
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return bound;
}

void HttpApi::Stop() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

}  // namespace claw

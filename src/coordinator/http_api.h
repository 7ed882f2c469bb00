// The HTTP/JSON mirror of the client API, plus /metrics and the dashboard.
//
//   POST /api/jobs               body: job spec JSON  -> 201 {"job_id": ...}
//   GET  /api/jobs               -> {"jobs": [...]}   (?limit=N)
//   GET  /api/jobs/{id}          -> job info
//   POST /api/jobs/{id}/cancel   -> job info
//   GET  /api/jobs/{id}/results  -> {"job": ..., "result": ...}
//   GET  /metrics                -> Prometheus text
//   GET  /                       -> dashboard
//
// Every /api call needs `Authorization: Bearer <API token>` (401 without),
// unless the coordinator runs with --insecure-local.
// Errors are 4xx/5xx with {"error": {"code": "...", "message": "..."}}.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "coordinator/coordinator.h"

namespace httplib {
class Server;
struct Request;
}

namespace claw {

class HttpApi {
 public:
  // Serves HTTPS with the given certificate and key files, or plain HTTP
  // when `cert_file` is empty (--insecure-local).
  HttpApi(Coordinator* coordinator, bool insecure_local, const std::string& cert_file = "",
          const std::string& key_file = "");
  ~HttpApi();
  // Binds `host:port` (port 0: any free port) and serves on a thread.
  // Returns the bound port.
  Result<int> Start(const std::string& host, int port);
  void Stop();

 private:
  void Routes();
  Result<UserRecord> Caller(const httplib::Request& req) const;
  Coordinator* coordinator_;
  bool insecure_local_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace claw

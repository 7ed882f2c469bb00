// The HTTP/JSON mirror of the client API, plus /metrics and the dashboard,
// served by HttpServer (libmicrohttpd's event loop: see http_server.h for
// what it does against idle and slow clients).
//
//   POST /api/jobs               body: job spec JSON  -> 201 job info
//   GET  /api/jobs               -> {"jobs": [...]}   (?limit=N)
//   GET  /api/jobs/{id}          -> job info
//   POST /api/jobs/{id}/cancel   -> job info
//   GET  /api/jobs/{id}/results  -> {"job": ..., "result": ...}
//   GET  /api/agents             -> {"agents": [...]}
//   GET  /api/blobs/{sha256}     -> the blob's bytes (ETag: its hash)
//   GET  /api/usage              -> this month's node-hours against quota (an admin: every user)
//   POST /api/users/{name}/tier  body: {"tier": "..."} (admin) -> the user's usage
//   POST /api/notifications      body: {"kind": "webhook"|"slack"|"email", "url": "..."} -> 201 the
//                                target, with its signing secret (shown once)
//   GET  /api/notifications      -> {"targets": [...]} (the caller's; no secrets)
//   DELETE /api/notifications/{id}
//   GET  /api/whoami             -> {"user", "tier", "admin"}
//   GET  /api/devices            -> {"devices": [...]}  (the caller's; an admin: all)
//   POST /api/devices/{id}/control body: {"action": "pause"|"finish"|"resume"} -> the device
//   GET  /api/stream?page=P[&job=ID] -> Server-Sent Events, the page's state (docs/dashboard.md)
//   GET  /metrics                -> Prometheus text
//
// Open to anyone, no token (docs/protocol.md, "The open ledger"):
//   GET  /ledger/checkpoint      -> the signed checkpoint (C2SP signed note)
//   GET  /ledger/key             -> the ledger's verifier key
//   GET  /ledger/entries?start=S&end=E            -> {"entries": [{"index", "data"}]}
//   GET  /ledger/proof/inclusion?index=I&size=N   -> {"hashes": [base64]}
//   GET  /ledger/proof/consistency?from=M&to=N    -> {"hashes": [base64]}
//   GET  /stats/credits.json     -> users and devices with their credit
//   GET  /stats/users.xml, /stats/hosts.xml       -> the same, as BOINC's db_dump
//   GET  /, /ui/*                -> the dashboard (web/, compiled in)
//
// Every /api call needs `Authorization: Bearer <API token>` (401 without),
// unless the coordinator runs with --insecure-local.
// Errors are 4xx/5xx with {"error": {"code": "...", "message": "..."}}.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/status.h"
#include "coordinator/coordinator.h"
#include "coordinator/dashboard_feed.h"
#include "coordinator/http_server.h"

namespace claw {

class HttpApi {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;                   // 0: any free port
    std::string cert_pem, key_pem;  // empty: plain HTTP (--insecure-local)
    bool insecure_local = false;    // no API tokens
    unsigned max_per_address = 64;  // connections from one address at once
    std::chrono::seconds header_deadline{10};  // to send a whole request head
    DashboardFeed::Options dashboard;
  };
  // Binds and serves. FailedPrecondition naming the port if it is in use.
  static Result<std::unique_ptr<HttpApi>> Start(Coordinator* coordinator, const Options& options,
                                                Logger log);
  int port() const { return server_->port(); }
  void Stop() {
    if (feed_) feed_->Stop();
    server_->Stop();
  }
  DashboardFeed* feed() { return feed_.get(); }

 private:
  HttpApi(Coordinator* coordinator, bool insecure_local)
      : coordinator_(coordinator), insecure_local_(insecure_local) {}
  HttpResponse Route(const HttpRequest& req);
  HttpResponse Jobs(const HttpRequest& req, const UserRecord& caller);
  HttpResponse Blob(const std::string& hash, const UserRecord& caller);
  HttpResponse Metrics();
  // http_books.cc
  HttpResponse Ledger(const HttpRequest& req, const std::vector<std::string>& seg);
  HttpResponse Stats(const HttpRequest& req, const std::vector<std::string>& seg);
  HttpResponse Users(const HttpRequest& req, const std::vector<std::string>& seg,
                     const UserRecord& caller);
  HttpResponse Notifications(const HttpRequest& req, const std::vector<std::string>& seg,
                             const UserRecord& caller);
  Result<UserRecord> Caller(const HttpRequest& req) const;
  // http_dashboard.cc
  HttpResponse Asset(const std::string& path);
  HttpResponse Dashboard(const HttpRequest& req, const std::vector<std::string>& seg,
                         const UserRecord& caller);

  Coordinator* coordinator_;
  bool insecure_local_;
  std::unique_ptr<DashboardFeed> feed_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace claw

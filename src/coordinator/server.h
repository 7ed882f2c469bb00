// CoordinatorServer: a Coordinator with its transports — the gRPC services,
// the HTTP API, and the timer that expires leases — on one data directory.
//
// On start it writes <data_dir>/coordinator.json naming the bound addresses
// (so that `--port 0` works for tests and local tools), and, the first time,
// <data_dir>/admin-token: the API token of the admin user (0600). Thread-safe; stopped
// by Shutdown() or the destructor.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <memory>
#include <string>
#include <thread>

#include "common/log.h"
#include "common/mutex.h"
#include "coordinator/blob_service.h"
#include "coordinator/coordinator.h"
#include "coordinator/dashboard_feed.h"
#include "coordinator/grpc_services.h"
#include "coordinator/http_api.h"
#include "coordinator/tcp_listener.h"
#include "store/store.h"

namespace claw {

struct ServerOptions {
  std::string data_dir = "./claw-data";
  std::string grpc_host = "127.0.0.1";
  int grpc_port = 7450;  // 0: any free port
  std::string http_host = "127.0.0.1";
  int http_port = 7451;  // 0: any free port; -1: no HTTP
  int max_message_bytes = 16 << 20;
  // Connections from one remote address at once, per port (more are
  // refused).
  size_t max_connections_per_address = 256;
  // A connection that completes no handshake (gRPC) or sends no whole
  // request head (HTTP) in this time is closed.
  Duration handshake_timeout = std::chrono::seconds(10);
  // One-time enrollment tokens to create at start, written to
  // <data_dir>/enroll-tokens (mode 0600).
  size_t enroll_tokens = 0;
  // No API tokens: every client call runs as the local user. Only allowed
  // on a loopback address (the demo, tests, a one-person setup).
  bool insecure_local = false;
  // Extra names (DNS or IP) for the server certificate made on first start.
  std::vector<std::string> tls_names;
  Duration enroll_token_ttl = std::chrono::hours(24);
  Duration tick = std::chrono::milliseconds(50);
  // The dashboard: how often its pages update, how often the network's
  // numbers are recorded, and how long they are kept.
  DashboardFeed::Options dashboard;
  SqliteOptions sqlite;
  CoordinatorOptions coordinator;
};

// The coordinator's Ed25519 key in <data_dir>/coordinator.key (hex, 0600):
// read it, or create it when `create` is set. NotFound when absent.
Result<std::string> LoadCoordinatorKey(const std::string& data_dir, bool create, Logger log);

// The open ledger's signing key in <data_dir>/ledger.key (a signed-note
// signer key, 0600), created on first start with a fresh origin; its
// verifier key, for anyone to check checkpoints with, in
// <data_dir>/ledger.pub.
Result<std::string> LoadLedgerKey(const std::string& data_dir, Logger log);

class CoordinatorServer {
 public:
  static Result<std::unique_ptr<CoordinatorServer>> Start(ServerOptions options,
                                                          const AppRegistry* apps, Logger log);
  ~CoordinatorServer();

  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  std::string grpc_target() const;
  std::string http_url() const;
  Coordinator* coordinator() { return coordinator_.get(); }
  const std::vector<std::string>& enroll_tokens() const { return tokens_; }

  // Stops accepting calls, ends sessions, and stops the timer. Idempotent.
  void Shutdown();
  // Blocks until Shutdown() is called from another thread.
  void Wait();

 private:
  CoordinatorServer() = default;
  Status WriteInfoFile() const;
  // Expires leases every options_.tick until Shutdown.
  void TickLoop();

  ServerOptions options_;
  Logger log_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<AgentServiceImpl> agent_service_;
  std::unique_ptr<ClientServiceImpl> client_service_;
  std::unique_ptr<BlobServiceImpl> blob_service_;
  std::unique_ptr<BlobDir> blobs_;
  std::unique_ptr<TcpListener> listener_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<HttpApi> http_;
  std::vector<std::string> tokens_;
  int grpc_port_ = 0;
  int http_port_ = -1;
  bool tls_ = false;

  Mutex mu_;
  std::condition_variable_any cv_;
  bool stopping_ CLAW_GUARDED_BY(mu_) = false;
  std::thread ticker_;  // runs TickLoop
};

}  // namespace claw

// TcpListener: the coordinator's own listening socket for gRPC, and the
// admission of each connection before gRPC sees it (ADR 0005).
//
// gRPC 1.51's listener stops accepting for good after accept4 fails once
// with EMFILE (tcp_server_posix.cc logs "Failed accept4" and never re-arms
// it), so a burst of idle connections from anyone who can reach the port
// took the network down until a restart. Here a thread of ours accepts:
//  - out of descriptors, it frees a spare one, accepts the waiting
//    connection and resets it, so the backlog drains and accepting goes on
//    by itself once descriptors are free again;
//  - a connection over the cap for its remote address, or over the global
//    cap (the descriptor limit less headroom), is reset at once;
//  - the rest go to gRPC (ExternalConnectionAcceptor, TLS or not), which
//    owns them from then on and closes those that complete no handshake
//    within its handshake timeout.
// Connections handed over are counted until gRPC closes them (a periodic
// check of each descriptor's inode tells).
//
// Thread-safe. Start once after the gRPC server is built; Stop before the
// server shuts down.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "common/status.h"

namespace grpc::experimental {
class ExternalConnectionAcceptor;
}

namespace claw {

// A listening TCP socket on host:port (port 0: any free one), close-on-exec
// and non-blocking, without SO_REUSEPORT: FailedPrecondition naming the
// port when another process holds it.
Result<int> ListenTcp(const std::string& host, int port, int backlog = 1024);
// The port a bound socket has.
int BoundPort(int fd);

// Raises this process's soft RLIMIT_NOFILE to its hard limit; returns the
// new soft limit.
uint64_t RaiseDescriptorLimit();

class TcpListener {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;                  // 0: any free port
    size_t max_per_address = 256;  // connections from one remote address at once
    size_t max_connections = 0;    // all at once; 0: the descriptor limit less 512
  };
  struct Counters {
    uint64_t accepted = 0;            // handed to gRPC
    uint64_t refused_per_address = 0; // reset: too many from one address
    uint64_t refused_full = 0;        // reset: too many in all
    uint64_t shed = 0;                // reset: out of descriptors
    size_t open = 0;                  // handed over and not yet closed
  };

  // Binds and listens (errors as ListenTcp's).
  static Result<std::unique_ptr<TcpListener>> Listen(const Options& options, Logger log);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  int port() const { return port_; }
  // Starts accepting; `acceptor` must outlive Stop().
  void Start(grpc::experimental::ExternalConnectionAcceptor* acceptor);
  // Stops accepting and closes the listening socket. Idempotent.
  void Stop();
  Counters counters() const;

 private:
  struct Connection {
    int fd;
    ino_t inode;
    std::string address;
  };
  TcpListener(int fd, int port, const Options& options, Logger log);
  void Loop();
  void AcceptReady();
  // Drops connections gRPC has closed (descriptor gone, or reused).
  void Sweep() CLAW_EXCLUDES(mu_);
  void Refuse(int fd);

  const int listen_fd_;
  const int port_;
  Options options_;
  Logger log_;
  grpc::experimental::ExternalConnectionAcceptor* acceptor_ = nullptr;
  int wake_[2] = {-1, -1};  // a pipe: Stop wakes the loop
  int spare_fd_ = -1;       // freed to accept-and-reset when out of descriptors
  std::thread thread_;
  std::atomic<bool> stopping_{false};

  mutable Mutex mu_;
  std::vector<Connection> connections_ CLAW_GUARDED_BY(mu_);
  std::map<std::string, size_t> per_address_ CLAW_GUARDED_BY(mu_);
  Counters counters_ CLAW_GUARDED_BY(mu_);
};

}  // namespace claw

#include "coordinator/tcp_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpcpp/server_builder.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace claw {

namespace {

constexpr size_t kDescriptorHeadroom = 512;  // gRPC's own, the store's, the HTTP server's

std::string AddressOf(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, text, sizeof text);
  } else if (a.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {  // the same client over either family
      inet_ntop(AF_INET, &v6.s6_addr[12], text, sizeof text);
    } else {
      inet_ntop(AF_INET6, &v6, text, sizeof text);
    }
  }
  return text;
}

// Closes with a reset rather than a FIN: the peer learns at once, and the
// socket does not linger in TIME_WAIT here.
void Reset(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

}  // namespace

Result<int> ListenTcp(const std::string& host, int port, int backlog) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return InvalidArgument("cannot listen on " + host + ": " + gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, freeaddrinfo);
  int fd = socket(found->ai_family, found->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  // SO_REUSEADDR only: a restart binds at once past TIME_WAIT, but another
  // live listener on the port is an error (SO_REUSEPORT would share it).
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, found->ai_addr, found->ai_addrlen) != 0) {
    int e = errno;
    close(fd);
    if (e == EADDRINUSE) {
      return FailedPrecondition("port " + std::to_string(port) + " on " + host +
                                " is in use (another coordinator, or another program): choose "
                                "another with --port / --http-port");
    }
    return Unavailable("cannot bind " + host + ":" + std::to_string(port) + ": " +
                       std::strerror(e));
  }
  if (listen(fd, backlog) != 0) {
    int e = errno;
    close(fd);
    return Unavailable("cannot listen on " + host + ":" + std::to_string(port) + ": " +
                       std::strerror(e));
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return 0;
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6&>(a).sin6_port);
  return 0;
}

uint64_t RaiseDescriptorLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
#ifdef __APPLE__
    raised.rlim_cur = std::min<rlim_t>(rl.rlim_max, OPEN_MAX);  // macOS refuses more
#endif
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(rl.rlim_cur);
}

Result<std::unique_ptr<TcpListener>> TcpListener::Listen(const Options& options, Logger log) {
  auto fd = ListenTcp(options.host, options.port);
  if (!fd.ok()) return fd.status();
  Options o = options;
  if (o.max_connections == 0) {
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    uint64_t limit = rl.rlim_cur == RLIM_INFINITY ? 1'000'000 : rl.rlim_cur;
    o.max_connections = limit > 2 * kDescriptorHeadroom ? limit - kDescriptorHeadroom : limit / 2;
  }
  return std::unique_ptr<TcpListener>(new TcpListener(*fd, BoundPort(*fd), o, std::move(log)));
}

TcpListener::TcpListener(int fd, int port, const Options& options, Logger log)
    : listen_fd_(fd), port_(port), options_(options), log_(std::move(log)) {
  if (pipe(wake_) == 0) {
    fcntl(wake_[0], F_SETFD, FD_CLOEXEC);
    fcntl(wake_[1], F_SETFD, FD_CLOEXEC);
  }
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

TcpListener::~TcpListener() {
  Stop();
  for (int fd : {wake_[0], wake_[1], spare_fd_}) {
    if (fd >= 0) close(fd);
  }
}

void TcpListener::Start(grpc::experimental::ExternalConnectionAcceptor* acceptor) {
  acceptor_ = acceptor;
  thread_ = std::thread([this] { Loop(); });
}

void TcpListener::Stop() {
  if (stopping_.exchange(true)) return;
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
}

TcpListener::Counters TcpListener::counters() const {
  MutexLock lock(mu_);
  Counters c = counters_;
  c.open = connections_.size();
  return c;
}

void TcpListener::Loop() {
  auto next_sweep = std::chrono::steady_clock::now();
  while (!stopping_) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    // Level-triggered, with a timeout: what is left in the backlog after
    // an out-of-descriptors spell is tried again within a second.
    int n = poll(fds, 2, 1000);
    if (stopping_) break;
    if (n > 0 && (fds[0].revents & POLLIN)) AcceptReady();
    if (std::chrono::steady_clock::now() >= next_sweep) {
      Sweep();
      next_sweep = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    }
  }
}

void TcpListener::AcceptReady() {
  for (int round = 0; round < 256 && !stopping_; ++round) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    // Non-blocking, as gRPC's own listener hands them over (its TLS handshake
    // stalls on a blocking socket).
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors. accept4 says so even with nothing waiting, so
        // free the spare, take one waiting connection and reset it; stop
        // when none waits.
        if (spare_fd_ >= 0) close(spare_fd_);
        int victim = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        bool drained = victim < 0;
        if (victim >= 0) Reset(victim);
        spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
        uint64_t shed;
        {
          MutexLock lock(mu_);
          shed = counters_.shed += victim >= 0;
        }
        if (victim >= 0 && (shed == 1 || shed % 1000 == 0)) {
          log_->warn("out of file descriptors: connections reset so far={} (raise the limit: "
                     "ulimit -n, or LimitNOFILE= in a systemd unit)",
                     shed);
        }
        if (drained || spare_fd_ < 0) return;
        continue;
      }
      return;  // EAGAIN: nothing more waits
    }
    std::string address = AddressOf(peer);
    struct stat st {};
    fstat(fd, &st);
    auto at_cap = [&] {
      MutexLock lock(mu_);
      auto it = per_address_.find(address);
      return (it != per_address_.end() && it->second >= options_.max_per_address) ||
             connections_.size() >= options_.max_connections;
    };
    if (at_cap()) Sweep();  // some may have closed since the last look
    {
      MutexLock lock(mu_);
      size_t& from = per_address_[address];
      if (from >= options_.max_per_address) {
        if (from == 0) per_address_.erase(address);
        if (counters_.refused_per_address++ % 1000 == 0) {
          log_->warn("connection refused from={} reason=over {} connections from one address",
                     address, options_.max_per_address);
        }
        Reset(fd);
        continue;
      }
      if (connections_.size() >= options_.max_connections) {
        if (from == 0) per_address_.erase(address);
        if (counters_.refused_full++ % 1000 == 0) {
          log_->warn("connection refused from={} reason=over {} connections in all", address,
                     options_.max_connections);
        }
        Reset(fd);
        continue;
      }
      ++from;
      connections_.push_back(Connection{fd, st.st_ino, address});
      counters_.accepted++;
    }
    grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
    p.listener_fd = listen_fd_;
    p.fd = fd;
    acceptor_->HandleNewConnection(&p);  // gRPC owns fd now
  }
}

void TcpListener::Sweep() {
  MutexLock lock(mu_);
  size_t kept = 0;
  for (Connection& c : connections_) {
    struct stat st {};
    if (fstat(c.fd, &st) == 0 && st.st_ino == c.inode && S_ISSOCK(st.st_mode)) {
      if (&connections_[kept] != &c) connections_[kept] = std::move(c);
      ++kept;
      continue;
    }
    auto it = per_address_.find(c.address);  // gRPC closed it
    if (it != per_address_.end() && --it->second == 0) per_address_.erase(it);
  }
  connections_.resize(kept);
}

}  // namespace claw

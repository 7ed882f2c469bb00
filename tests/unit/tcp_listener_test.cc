// The coordinator's listener out of file descriptors: it sheds what it
// cannot hold (accepting and resetting, so the backlog drains) and accepts
// again by itself once descriptors are free; gRPC 1.51's own listener
// stopped for good at the first EMFILE.
#include "coordinator/tcp_listener.h"

#include <gtest/gtest.h>
#include <grpcpp/server_builder.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace claw {
namespace {

// Stands in for gRPC: greets each connection it is handed and holds it.
class HoldingAcceptor : public grpc::experimental::ExternalConnectionAcceptor {
 public:
  void HandleNewConnection(NewConnectionParameters* p) override {
    (void)!write(p->fd, "A", 1);
    std::lock_guard lock(mu_);
    fds_.push_back(p->fd);
  }
  void CloseAll() {
    std::lock_guard lock(mu_);
    for (int fd : fds_) close(fd);
    fds_.clear();
  }
  size_t held() {
    std::lock_guard lock(mu_);
    return fds_.size();
  }

 private:
  std::mutex mu_;
  std::vector<int> fds_;
};

// What became of a client's connection: 'A' (handed over), 'R' (reset or
// closed), '?' (nothing yet).
char Fate(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char c = 0;
  ssize_t n = recv(fd, &c, 1, 0);
  if (n == 1) return c;
  if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return 'R';
  return '?';
}

bool Connect(int fd, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

TEST(TcpListener, OutOfDescriptorsItShedsConnectionsAndAcceptsAgainAfter) {
  TcpListener::Options o;
  o.max_connections = 100'000;  // no cap: run out of descriptors for real
  o.max_per_address = 100'000;
  auto listener = TcpListener::Listen(o, NullLogger());
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  // The clients' sockets exist before the limit drops (connect takes none).
  std::vector<int> clients;
  for (int i = 0; i < 60; ++i) clients.push_back(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int highest = *std::max_element(clients.begin(), clients.end());
  rlimit old{};
  getrlimit(RLIMIT_NOFILE, &old);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(highest + 8);  // room for a few accepted ones
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);

  HoldingAcceptor acceptor;
  (*listener)->Start(&acceptor);
  for (int fd : clients) ASSERT_TRUE(Connect(fd, (*listener)->port()));
  int handed = 0, reset = 0;
  for (int fd : clients) {
    char f = Fate(fd, 2000);
    handed += f == 'A';
    reset += f == 'R';
  }
  EXPECT_EQ(handed + reset, 60) << "every connection got an answer: none hangs in the backlog";
  EXPECT_LE(handed, 8);
  EXPECT_GE(reset, 50);
  EXPECT_GE((*listener)->counters().shed, 50u);

  // Descriptors free again: a new connection is accepted, with no restart.
  acceptor.CloseAll();
  for (int fd : clients) close(fd);
  int fresh = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_TRUE(Connect(fresh, (*listener)->port()));
  EXPECT_EQ(Fate(fresh, 3000), 'A');
  close(fresh);
  setrlimit(RLIMIT_NOFILE, &old);
  (*listener)->Stop();
}

// Over the cap for one address, or over the cap in all: reset at once;
// room again once the held ones close.
TEST(TcpListener, CapsPerAddressAndInAll) {
  TcpListener::Options o;
  o.max_per_address = 5;
  auto listener = TcpListener::Listen(o, NullLogger());
  ASSERT_TRUE(listener.ok());
  HoldingAcceptor acceptor;
  (*listener)->Start(&acceptor);
  std::vector<int> clients;
  std::string fates;
  for (int i = 0; i < 8; ++i) {
    clients.push_back(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    ASSERT_TRUE(Connect(clients.back(), (*listener)->port()));
    fates += Fate(clients.back(), 2000);
  }
  EXPECT_EQ(fates, "AAAAARRR");
  EXPECT_EQ((*listener)->counters().refused_per_address, 3u);
  EXPECT_EQ((*listener)->counters().open, 5u);
  acceptor.CloseAll();
  for (int fd : clients) close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // the next sweep
  EXPECT_EQ((*listener)->counters().open, 0u);
  int again = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_TRUE(Connect(again, (*listener)->port()));
  EXPECT_EQ(Fate(again, 2000), 'A');
  close(again);
  (*listener)->Stop();
}

TEST(TcpListener, APortInUseIsRefusedNamingIt) {
  auto first = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(first.ok());
  int port = BoundPort(*first);
  auto second = ListenTcp("127.0.0.1", port);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("port " + std::to_string(port) + " on 127.0.0.1 is in use"),
            std::string::npos)
      << second.status().message();
  close(*first);
}

}  // namespace
}  // namespace claw

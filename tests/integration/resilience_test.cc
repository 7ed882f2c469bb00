// Resilience of the coordinator's ports against anyone who can reach them:
// bursts of idle connections that exhaust descriptors, connections that
// never speak, many connections from one address, slow clients, and a
// second coordinator on ports in use. Real sockets on loopback, bounded in
// number and time.
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <fstream>

#include "harness.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

// A TCP connection to 127.0.0.1:port that sends nothing; -1 if refused.
int IdleConnection(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the server closes (or resets) the connection within `limit`:
// what it sends first (an HTTP/2 server's SETTINGS) is read and dropped.
bool ClosedByServer(int fd, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    timeval tv{static_cast<time_t>(left.count() / 1000),
               static_cast<suseconds_t>((left.count() % 1000) * 1000)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[256];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
}

class Resilience : public Network {
 protected:
  void SetUp() override {
    Network::SetUp();
    // This process opens hundreds of sockets itself.
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  // The coordinator under a hard descriptor limit of `nofile`, started
  // through the shell's ulimit as an operator would.
  void StartLimitedCoordinator(int nofile, std::vector<std::string> extra) {
    std::string cmd = "ulimit -n " + std::to_string(nofile) + " && exec " CLAW_BINARY
                      " coordinator --insecure-local --data " + data() + " --port " +
                      std::to_string(port_) + " --http-port -1 --enroll-tokens 4";
    for (const auto& e : extra) cmd += " " + e;
    limited_ = std::make_unique<Process>(std::vector<std::string>{"-c", cmd},
                                         (dir_ / "coordinator.log").string(), "/bin/sh");
    ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(data() + "/coordinator.json"); },
                        seconds(20)))
        << limited_->Output();
  }
  void TearDown() override {
    limited_.reset();
    Network::TearDown();
  }
  std::unique_ptr<Process> limited_;
};

// Found from the outside: with the coordinator under `ulimit -n 1024`, 1,100
// idle connections made gRPC's own listener fail accept4 with EMFILE, and it
// never accepted again. Now the port refuses what it cannot hold and accepts
// again by itself once the connections are gone.
TEST_F(Resilience, TheGrpcPortAcceptsAgainAfterDescriptorsRunOut) {
  StartLimitedCoordinator(200, {"--connections-per-address", "100000"});
  std::vector<int> idle;
  for (int i = 0; i < 400; ++i) {
    int fd = IdleConnection(port_);
    if (fd >= 0) idle.push_back(fd);
  }
  // While they are held, descriptors are out: calls may fail, the process lives.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (int fd : idle) close(fd);
  Client client(target(), seconds(5));
  bool recovered = WaitFor([&] { return client.ListJobs(10).ok(); }, seconds(30));
  EXPECT_TRUE(recovered) << limited_->Output();
  EXPECT_FALSE(limited_->Exited(std::chrono::milliseconds(0))) << limited_->Output();
  // The global cap (the descriptor limit less headroom) refused the excess
  // before descriptors ran out (TcpListener's unit test runs them out).
  EXPECT_NE(limited_->Output().find("connections in all"), std::string::npos)
      << limited_->Output();
  // And it keeps working: a real agent connects and does work.
  StartAgent();
  auto id = client.Submit(R"({"app":"noop","tasks":20})");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(WaitForJobEnd(client, *id, seconds(30)).state(), "done");
}

// Connections that never complete a handshake are closed after the
// handshake timeout; a per-address cap resets what is over it.
TEST_F(Resilience, SilentConnectionsAreClosedAndOneAddressIsCapped) {
  StartLimitedCoordinator(4096, {"--handshake-timeout", "1", "--connections-per-address", "20"});
  std::vector<int> idle;
  for (int i = 0; i < 30; ++i) idle.push_back(IdleConnection(port_));
  // The 21st and later: reset at once.
  int refused = 0;
  for (size_t i = 20; i < idle.size(); ++i) {
    refused += idle[i] < 0 || ClosedByServer(idle[i], std::chrono::milliseconds(1000));
  }
  EXPECT_EQ(refused, 10);
  // The first 20: closed by the server once the handshake timeout passes.
  auto start = std::chrono::steady_clock::now();
  int closed = 0;
  for (size_t i = 0; i < 20; ++i) closed += ClosedByServer(idle[i], std::chrono::milliseconds(5000));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(closed, 20);
  EXPECT_LT(took, 4.0) << "a 1 s handshake timeout";
  for (int fd : idle) {
    if (fd >= 0) close(fd);
  }
  // Room again for real clients from the same address.
  Client client(target(), seconds(5));
  EXPECT_TRUE(WaitFor([&] { return client.ListJobs(10).ok(); }, seconds(10)));
}

// A second coordinator on ports in use is refused, naming the port (it
// used to bind them too, and the kernel split connections between the two).
TEST_F(Resilience, ASecondCoordinatorOnPortsInUseIsRefused) {
  StartCoordinator();
  std::string out;
  for (auto [grpc, http] : {std::pair{port_, FreePort()}, std::pair{FreePort(), http_port_}}) {
    Process second({"coordinator", "--insecure-local", "--data", (dir_ / "d2").string(), "--port",
                    std::to_string(grpc), "--http-port", std::to_string(http)},
                   (dir_ / "second.log").string());
    EXPECT_TRUE(second.Exited(seconds(20)));
    EXPECT_EQ(second.exit_code(), 2) << second.Output();
    int taken = grpc == port_ ? grpc : http;
    EXPECT_NE(second.Output().find("port " + std::to_string(taken)), std::string::npos)
        << second.Output();
    EXPECT_NE(second.Output().find("in use"), std::string::npos) << second.Output();
    std::filesystem::remove_all(dir_ / "d2");
  }
}

}  // namespace
}  // namespace claw::testing

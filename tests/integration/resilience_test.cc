// Resilience of the coordinator's ports against anyone who can reach them:
// bursts of idle connections that exhaust descriptors, connections that
// never speak, many connections from one address, slow clients, and a
// second coordinator on ports in use. Real sockets on loopback, bounded in
// number and time.
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "harness.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

// A TCP connection to 127.0.0.1:port that sends nothing; -1 if refused.
// `from`: the source address, another of loopback's 127.0.0.0/8 (0: any),
// so that many clients can be played from one machine.
int IdleConnection(int port, uint32_t from = 0) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (from != 0) {
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(from);
    bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src);
  }
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

// Found from the outside: 16 idle connections delayed /metrics by ~5 s and
// 32 stopped it (a thread per connection). Now hundreds of idle clients and
// slowloris clients, sending a byte at a time, leave real requests served
// at once; the slow ones are cut at the head deadline, and one address is
// capped.
TEST_F(Resilience, IdleAndSlowHttpClientsDoNotStarveRealRequests) {
  StartCoordinator({"--handshake-timeout", "2", "--connections-per-address", "40"});
  auto metrics_ms = [&] {
    auto start = std::chrono::steady_clock::now();
    std::string out;
    Process curl({"-s", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}",
                  "http://127.0.0.1:" + std::to_string(http_port_) + "/metrics"},
                 (dir_ / "curl.log").string(), "/usr/bin/curl");
    int rc = curl.Wait();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count();
    return rc == 0 && curl.Output().find("200") != std::string::npos ? ms : -1.0;
  };
  ASSERT_GT(metrics_ms(), 0);
  // 300 idle connections from 10 addresses, and 30 that dribble a request
  // head one byte at a time from 3 more.
  std::vector<int> idle, slow;
  for (uint32_t i = 0; i < 300; ++i) {
    idle.push_back(IdleConnection(http_port_, 0x7f000002 + i / 30));
  }
  for (uint32_t i = 0; i < 30; ++i) slow.push_back(IdleConnection(http_port_, 0x7f000010 + i / 10));
  std::atomic<bool> dribbling{true};
  std::thread dribbler([&] {
    const std::string head = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: ";
    for (size_t at = 0; dribbling; ++at) {
      for (int fd : slow) {
        if (fd >= 0) send(fd, at < head.size() ? &head[at] : "a", 1, MSG_NOSIGNAL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  std::vector<double> times;
  for (int i = 0; i < 5; ++i) times.push_back(metrics_ms());
  for (double t : times) {
    EXPECT_GT(t, 0) << "a real request failed while the idle and slow ones were held";
    EXPECT_LT(t, 1000) << "ms for /metrics";
  }
  // The dribblers are cut at the 2 s head deadline though they never go quiet.
  int cut = 0;
  for (int fd : slow) cut += ClosedByServer(fd, std::chrono::milliseconds(6000));
  dribbling = false;
  dribbler.join();
  EXPECT_EQ(cut, 30);
  // Over the cap for one address: refused at once.
  std::vector<int> many;
  for (int i = 0; i < 50; ++i) many.push_back(IdleConnection(http_port_, 0x7f000020));
  int refused = 0;
  for (size_t i = 40; i < many.size(); ++i) {
    refused += many[i] < 0 || ClosedByServer(many[i], std::chrono::milliseconds(1000));
  }
  EXPECT_EQ(refused, 10);
  for (auto* list : {&idle, &slow, &many}) {
    for (int fd : *list) {
      if (fd >= 0) close(fd);
    }
  }
  EXPECT_GT(metrics_ms(), 0);
}

}  // namespace
}  // namespace claw::testing

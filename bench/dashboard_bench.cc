// The dashboard under load: a coordinator with 1,000 devices and 10,000
// jobs, measured from headless Chromium (tests/browser/dashboard_bench.mjs):
//   - first paint of each page (navigation to the page's data on screen);
//   - live-update latency (a job submitted -> its row on the open Jobs page);
//   - the coordinator's CPU with 20 dashboards open against none, while
//     devices finish and take tasks (~20 a second) in both phases.
//
// The devices are sessions opened in this process on the coordinator's own
// interface (Coordinator::OpenSession), each with a signed hello and signed
// reports: what the coordinator does for them — scheduling, device states,
// the dashboard's views — is what it does for real agents, without 1,000
// processes on a 2-core machine. Needs `chromium` and tests/browser's npm
// packages (scripts/setup.sh).
//
//   dashboard_bench [devices=1000] [jobs=10000]
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/registry.h"
#include "cli/client.h"
#include "common/crypto.h"
#include "coordinator/server.h"
#include "protocol/signing.h"

namespace claw {
namespace {

// A device: a session that holds what it is assigned until told to finish.
class FakeDevice final : public SessionSink {
 public:
  void Send(const v1::CoordinatorMessage& msg) override {
    std::lock_guard lock(mu_);
    for (const auto& a : msg.assignments()) leases_.push_back(a.lease_id());
  }
  void Close(const Status&) override {}
  std::vector<uint64_t> Take() {
    std::lock_guard lock(mu_);
    return std::exchange(leases_, {});
  }
  AgentId id;
  KeyPair key;

 private:
  std::mutex mu_;
  std::vector<uint64_t> leases_;
};

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

int Run(size_t n_devices, size_t n_jobs) {
  InitCrypto();
  const auto dir = std::filesystem::temp_directory_path() / ("claw-dash-bench-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  AppRegistry apps = BuiltinApps();
  ServerOptions so;
  so.data_dir = dir.string();
  so.grpc_port = 0;
  so.http_port = 0;
  so.insecure_local = true;
  so.max_connections_per_address = 1024;
  auto server = CoordinatorServer::Start(so, &apps, NullLogger());
  if (!server.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", server.status().ToString().c_str());
    return 1;
  }
  Coordinator* c = (*server)->coordinator();
  std::printf("dashboard bench: %zu devices, %zu jobs, coordinator at %s\n", n_devices, n_jobs,
              (*server)->http_url().c_str());

  // Devices: enrolled, each with a session; a few owners' own (the Me page
  // is the local user's), some paused by their owners, some owner-busy.
  std::vector<std::unique_ptr<FakeDevice>> devices;
  for (size_t i = 0; i < n_devices; ++i) {
    auto d = std::make_unique<FakeDevice>();
    d->key = GenerateSigningKey();
    const std::string owner = i < 20 ? "local" : "user-" + std::to_string(i % 50);
    auto token = c->CreateEnrollTokens(1, std::chrono::hours(1), owner);
    v1::EnrollRequest req;
    req.set_token(token->front());
    req.set_public_key(d->key.public_key);
    v1::DeviceReport* dev = req.mutable_device();
    dev->set_hostname("host-" + std::to_string(i));
    dev->set_os(i % 3 == 0 ? "darwin" : "linux");
    dev->set_arch(i % 3 == 0 ? "arm64" : "x86_64");
    dev->set_cores(8);
    dev->set_memory_bytes(16ULL << 30);
    dev->set_flops(2e9 + static_cast<double>(i) * 1e6);
    dev->set_slots(1);
    auto enrolled = c->Enroll(req);
    if (!enrolled.ok()) {
      std::fprintf(stderr, "enroll: %s\n", enrolled.status().ToString().c_str());
      return 1;
    }
    d->id = enrolled->agent_id();
    v1::Hello hello;
    hello.set_agent_id(d->id);
    hello.set_unix_ms(SystemClock::Get()->Now().unix_ms());
    hello.set_signature(Sign("claw-session-v1|" + d->id + "|" + std::to_string(hello.unix_ms()), d->key.secret_key));
    *hello.mutable_device() = req.device();
    if (auto st = c->OpenSession(hello, d.get()); !st.ok()) {
      std::fprintf(stderr, "session: %s\n", st.status().ToString().c_str());
      return 1;
    }
    devices.push_back(std::move(d));
  }
  // Jobs: one task each, so most wait in the queue.
  for (size_t j = 0; j < n_jobs; ++j) {
    auto id = c->Submit(R"({"app":"noop","tasks":1,"name":"job-)" + std::to_string(j) + "\"}", LocalUser());
    if (!id.ok()) {
      std::fprintf(stderr, "submit: %s\n", id.status().ToString().c_str());
      return 1;
    }
  }
  // Every tenth device owner-busy, every twentieth paused; the rest ask for work.
  for (size_t i = 0; i < devices.size(); ++i) {
    v1::AgentMessage m;
    v1::AgentStatus* st = m.mutable_status();
    st->set_availability(i % 10 == 3 ? "away" : "available");
    st->set_control(i % 20 == 7 ? "paused" : "none");
    st->set_why(i % 10 == 3 ? "user active 4 s ago" : "");
    if (i % 10 != 3 && i % 20 != 7) m.set_want(1);
    c->OnAgentMessage(devices[i].get(), m);
  }
  // Churn: devices finish what they hold and take more, ~20 a second.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> finished{0};
  std::thread churn([&] {
    size_t next = 0;
    while (!stop) {
      FakeDevice& d = *devices[next++ % devices.size()];
      std::vector<uint64_t> leases = d.Take();
      if (!leases.empty()) {
        v1::AgentMessage m;
        for (uint64_t l : leases) {
          v1::TaskResult* r = m.add_results();
          r->set_lease_id(l);
          r->set_output("{}");
          r->set_runtime_us(1000);
        }
        m.set_want(static_cast<uint32_t>(leases.size()));
        SignReports(d.id, d.key.secret_key, &m);
        c->OnAgentMessage(&d, m);
        finished += leases.size();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(2));
  auto m = c->Metrics();
  std::printf("state: %zu agents connected, %zu working, %zu tasks pending\n", m.connected_agents,
              m.agents_working, m.pending_tasks);

  // The browser side: tests/browser/dashboard_bench.mjs prints one JSON line
  // per phase; the CPU phases ask us for our CPU time through a file.
  const std::string cpu_file = (dir / "cpu").string();
  std::atomic<bool> cpu_stop{false};
  std::thread cpu_writer([&] {
    while (!cpu_stop) {
      FILE* f = std::fopen((cpu_file + ".tmp").c_str(), "w");
      if (f) {
        std::fprintf(f, "%.6f %llu\n", CpuSeconds(), static_cast<unsigned long long>(finished.load()));
        std::fclose(f);
        std::filesystem::rename(cpu_file + ".tmp", cpu_file);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const std::string cmd = std::string("node ") + CLAW_SOURCE_DIR + "/tests/browser/dashboard_bench.mjs " +
                          (*server)->http_url() + " " + cpu_file;
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  cpu_stop = true;
  cpu_writer.join();
  stop = true;
  churn.join();
  (*server)->Shutdown();
  std::filesystem::remove_all(dir);
  return rc == 0 ? 0 : 1;
}

}  // namespace
}  // namespace claw

int main(int argc, char** argv) {
  const size_t devices = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1000;
  const size_t jobs = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 10000;
  return claw::Run(devices, jobs);
}

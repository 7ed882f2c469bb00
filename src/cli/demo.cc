#include "cli/demo.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "agent/agent.h"
#include "apps/registry.h"
#include "cli/client.h"
#include "cli/output.h"
#include "coordinator/server.h"

namespace claw {
namespace {

struct DemoOptions {
  std::string data_dir = "./claw-demo";
  size_t agents = 2;
  size_t slots = 1;
  double paths = 1e8;
  uint32_t tasks = 200;
  int http_port = 7451;
  bool keep = false;  // keep serving the dashboard after the job
};

int RunDemo(const DemoOptions& o, std::atomic<bool>* interrupted) {
  AppRegistry apps = BuiltinApps();
  ServerOptions so;
  so.data_dir = o.data_dir;
  so.grpc_port = 0;
  so.http_port = o.http_port;
  so.enroll_tokens = o.agents;
  so.insecure_local = true;  // one person on one machine, loopback only
  auto server = CoordinatorServer::Start(so, &apps, NullLogger());
  if (!server.ok() && o.http_port != 0) {  // the usual port is taken: any will do
    so.http_port = 0;
    server = CoordinatorServer::Start(so, &apps, NullLogger());
  }
  if (!server.ok()) {
    std::fprintf(stderr, "error: %s\n", server.status().ToString().c_str());
    return 2;
  }
  std::printf("coordinator  grpc %s\n", (*server)->grpc_target().c_str());
  std::printf("dashboard    %s\n", (*server)->http_url().c_str());

  std::vector<std::unique_ptr<Agent>> agents;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < o.agents; ++i) {
    AgentOptions ao;
    ao.coordinator = (*server)->grpc_target();
    ao.state_dir = o.data_dir + "/agent-" + std::to_string(i);
    std::filesystem::remove_all(ao.state_dir);  // enroll afresh with this run's token
    ao.tokens = {(*server)->enroll_tokens()[i]};
    ao.slots = o.slots;
    ao.availability.always = true;  // a demo on a laptop in use would otherwise wait
    agents.push_back(std::make_unique<Agent>(ao, SystemClock::Get(), NewSystemSensors(),
                                             NullLogger()));
    threads.emplace_back([a = agents.back().get()] { (void)a->Run(); });
  }
  std::printf("agents       %zu local agents x %zu worker process(es)\n", o.agents, o.slots);

  nlohmann::json spec = {{"app", "montecarlo"},
                         {"name", "demo-european-call"},
                         {"tasks", o.tasks},
                         {"seed", 2026},
                         {"params",
                          {{"model", "european_call"},
                           {"paths", static_cast<uint64_t>(o.paths)},
                           {"S0", 100},
                           {"K", 110},
                           {"r", 0.05},
                           {"sigma", 0.2},
                           {"T", 1.0}}}};
  std::printf("job          European call, S0=100 K=110 r=5%% sigma=20%% T=1y, %.3g paths in %u tasks\n",
              o.paths, o.tasks);
  Client client((*server)->grpc_target());
  auto id = client.Submit(spec.dump());
  int rc = 0;
  if (!id.ok()) {
    std::fprintf(stderr, "error: %s\n", id.status().ToString().c_str());
    rc = 2;
  } else {
    std::thread canceller([&] {  // Ctrl-C cancels the job, which ends the watch
      while (!*interrupted) usleep(50'000);
      (void)client.Cancel(*id);
    });
    std::fflush(stdout);
    Stopwatch w;
    rc = WaitAndPrint(client, *id, false);
    std::printf("  wall time  %.2f s\n", w.Seconds());
    if (o.keep && rc == 0) {
      std::printf("serving the dashboard at %s until Ctrl-C\n", (*server)->http_url().c_str());
      std::fflush(stdout);
      while (!*interrupted) usleep(100'000);
    }
    *interrupted = true;
    canceller.join();
  }
  for (auto& a : agents) a->Stop();
  for (auto& t : threads) t.join();
  (*server)->Shutdown();
  std::printf("stopped.\n");
  return rc;
}

}  // namespace

void AddDemo(CLI::App& cli, std::atomic<bool>* interrupted,
             std::function<void()> install_signal_handlers) {
  auto* cmd = cli.add_subcommand("demo", "Start a local network, run a Monte Carlo job, show the result");
  auto o = std::make_shared<DemoOptions>();
  cmd->add_option("--data", o->data_dir, "Data directory")->capture_default_str();
  cmd->add_option("--agents", o->agents, "Local agents")->capture_default_str();
  cmd->add_option("--slots", o->slots, "Worker processes per agent")->capture_default_str();
  cmd->add_option("--paths", o->paths, "Monte Carlo paths")->capture_default_str();
  cmd->add_option("--tasks", o->tasks, "Tasks")->capture_default_str();
  cmd->add_option("--http-port", o->http_port, "Dashboard port (0: any)")->capture_default_str();
  cmd->add_flag("--keep", o->keep, "Keep serving the dashboard after the job until Ctrl-C");
  cmd->fallthrough();
  cmd->callback([=] {
    install_signal_handlers();
    int rc = RunDemo(*o, interrupted);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace claw

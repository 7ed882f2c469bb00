// `claw agent`: a device's agent, its flags and --config file, --detach and
// `claw agent stop`; and `claw __worker`, the worker process agents start.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/agent.h"
#include "agent/agent_control.h"
#include "agent/worker_main.h"
#include "apps/ml_sandbox.h"
#include "apps/registry.h"
#include "cli/command_parts.h"
#include "cli/detach.h"
#include "common/files.h"
#include "coordinator/certificates.h"
#include "rounds/training_spec.h"

namespace claw {
namespace {

// ---- agent ----------------------------------------------------------------------------

// A local dataset, NAME=DIR: a directory of the device's that training jobs
// naming it read (ADR 0007: its files never leave the device).
Status AddDataset(const std::string& spec, AgentOptions* opts) {
  auto eq = spec.find('=');
  std::string name = spec.substr(0, eq);
  if (eq == std::string::npos || !rounds::IsDatasetName(name)) {
    return InvalidArgument("dataset '" + spec.substr(0, 100) +
                           "': NAME=DIR, the name of letters, digits, '-', '_' and '.'");
  }
  std::error_code ec;
  auto dir = std::filesystem::canonical(spec.substr(eq + 1), ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return NotFound("dataset " + name + ": no directory " + spec.substr(eq + 1));
  }
  opts->datasets[name] = dir.string();
  return Status::Ok();
}

// "22-7": work from 22:00 to 07:00, local time.
Status ParseHours(const std::string& text, AgentOptions* opts) {
  int from = -1, to = -1;
  char dash = 0;
  if (std::sscanf(text.c_str(), "%d%c%d", &from, &dash, &to) != 3 || dash != '-' || from < 0 ||
      from > 23 || to < 0 || to > 23) {
    return InvalidArgument("hours: FROM-TO, whole hours 0..23 of local time (e.g. 22-7), got '" +
                           text.substr(0, 40) + "'");
  }
  opts->availability.from_hour = from;
  opts->availability.to_hour = to;
  return Status::Ok();
}

// Reads an agent's --config file: the same settings as the flags, by the
// names the README gives. An unknown key or a wrong type is refused, named.
Status ApplyAgentConfig(const std::string& path, AgentOptions* opts, double* idle_min,
                        bool* allow_battery, double* grace_s) {
  std::ifstream f(path);
  if (!f) return NotFound("cannot read --config " + path);
  auto j = nlohmann::json::parse(f, nullptr, false);
  if (!j.is_object()) return InvalidArgument(path + ": not a JSON object");
  static const char* kKeys[] = {"max_other_cpu", "idle_minutes", "allow_battery", "grace_s",
                                "slots",         "always",       "datasets",      "hours",
                                "max_memory_used"};
  for (const auto& [key, value] : j.items()) {
    if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys)) {
      std::string known;
      for (const char* k : kKeys) known += (known.empty() ? "" : ", ") + std::string(k);
      return InvalidArgument(path + ": unknown key '" + key + "' (known: " + known + ")");
    }
  }
  try {
    opts->availability.max_other_cpu = j.value("max_other_cpu", opts->availability.max_other_cpu);
    *idle_min = j.value("idle_minutes", *idle_min);
    *allow_battery = j.value("allow_battery", *allow_battery);
    *grace_s = j.value("grace_s", *grace_s);
    opts->slots = j.value("slots", opts->slots);
    opts->availability.always = j.value("always", opts->availability.always);
    if (j.contains("hours")) CLAW_RETURN_IF_ERROR(ParseHours(j["hours"].get<std::string>(), opts));
    opts->availability.max_memory_used = j.value("max_memory_used", opts->availability.max_memory_used);
    if (!(opts->availability.max_memory_used > 0 && opts->availability.max_memory_used <= 1)) {
      return InvalidArgument(path + ": max_memory_used: a share of the memory, above 0 and at most 1");
    }
    if (j.contains("datasets")) {
      if (!j["datasets"].is_object()) return InvalidArgument(path + ": datasets: {\"name\": \"/dir\"}");
      for (const auto& [name, dir] : j["datasets"].items()) {
        CLAW_RETURN_IF_ERROR(AddDataset(name + "=" + dir.get<std::string>(), opts));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(path + ": a field has the wrong type (" + e.what() + ")");
  }
  return Status::Ok();
}

}  // namespace

void AddAgent(CLI::App& cli) {
  auto* cmd = cli.add_subcommand("agent", "Run an agent that does work while the device is idle");
  auto opts = std::make_shared<AgentOptions>();
  auto token_file = std::make_shared<std::string>();
  auto config = std::make_shared<std::string>();
  auto memory_mb = std::make_shared<uint64_t>(0);
  auto idle_min = std::make_shared<double>(5);
  auto grace_s = std::make_shared<double>(30);
  auto allow_battery = std::make_shared<bool>(false);
  opts->coordinator = DefaultCoordinator();
  cmd->add_option("--coordinator,-c", opts->coordinator,
                  "Coordinator host:port (env CLAW_COORDINATOR)")
      ->capture_default_str();
  cmd->add_option("--state", opts->state_dir, "State directory (identity key)")->capture_default_str();
  auto token = std::make_shared<std::string>();
  cmd->add_option("--token", *token, "One-time enrollment token (first start)");
  cmd->add_option("--token-file", *token_file,
                  "Enroll with the first token in FILE (one a line) that is not yet used; "
                  "agents started together on one file each get their own");
  auto ca_file = std::make_shared<std::string>();
  if (const char* env = std::getenv("CLAW_CA")) *ca_file = env;
  cmd->add_option("--ca", *ca_file,
                  "The coordinator's CA certificate (its <data>/ca.pem) to pin (env CLAW_CA); "
                  "without it, plaintext for a coordinator run with --insecure-local");
  cmd->add_option("--config", *config, "JSON file with availability thresholds and slots");
  cmd->add_option("--slots", opts->slots, "Worker processes (0: one per core)")->capture_default_str();
  auto datasets = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--dataset", *datasets,
                  "NAME=DIR: a local dataset that training jobs naming it use here, and that "
                  "never leaves the device (repeatable)");
  cmd->add_flag("--always", opts->availability.always, "Dedicated machine: ignore idle checks");
  cmd->add_option("--max-other-cpu", opts->availability.max_other_cpu,
                  "Pause when others use more than this share of the CPU")->capture_default_str();
  cmd->add_option("--idle-minutes", *idle_min, "Minutes the user must be idle")->capture_default_str();
  cmd->add_flag("--allow-battery", *allow_battery, "Also work on battery power");
  cmd->add_option("--grace", *grace_s, "Seconds paused before handing tasks back")->capture_default_str();
  auto hours = std::make_shared<std::string>();
  cmd->add_option("--hours", *hours, "Work only between these local hours, e.g. 22-7");
  cmd->add_option("--max-memory-used", opts->availability.max_memory_used,
                  "Stop while more than this share of the machine's memory is in use (0..1)")
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_option("--memory-mb", *memory_mb,
                  "Most memory any one task may use, whatever its job asks (0: the job's)");
  cmd->add_option("--cpu-seconds", opts->limits.cpu_seconds,
                  "Most CPU time any one task may use, whatever its job asks")
      ->capture_default_str();
  auto disk_mb = std::make_shared<uint64_t>(0);
  cmd->add_option("--disk-mb", *disk_mb,
                  "Most disk any one sandboxed task may fill, whatever its job asks (0: the job's)");
  auto cache_mb = std::make_shared<uint64_t>(opts->cache_bytes >> 20);
  cmd->add_option("--cache-mb", *cache_mb,
                  "Most disk the cache of input files (STATE/blobs) may take; least recently "
                  "used go first")
      ->capture_default_str();
  cmd->add_option("--cgroups", opts->cgroups,
                  "How sandboxed tasks are held: auto, v2, v1 or none (then per-process limits only)")
      ->check(CLI::IsMember({"auto", "v2", "v1", "none"}))
      ->capture_default_str();
  auto sensors_file = std::make_shared<std::string>();
  cmd->add_option("--sensors-file", *sensors_file,
                  "Read availability sensors from a JSON file (rehearsal, tests)")
      ->group("");  // hidden
  cmd->add_option("--misbehave", opts->misbehave,
                  "Misbehave on purpose in training rounds: flip (the delta's sign), scale=K "
                  "(the delta times K), slow=K (take K times as long): benchmarks and fault "
                  "tests of the coordinator's defences")
      ->check([](const std::string& v) {
        return v == "flip" || v.rfind("scale=", 0) == 0 || v.rfind("slow=", 0) == 0
                   ? std::string()
                   : std::string("flip, scale=K or slow=K");
      })
      ->group("");  // hidden
  auto detach = std::make_shared<bool>(false);
  cmd->add_flag("--detach", *detach,
                "Run in the background: return once enrolled and working (log in "
                "STATE/agent.log; `claw agent stop --state STATE` ends it)");
  auto* stop = cmd->add_subcommand("stop", "Stop the agent running on --state");
  stop->add_option("--state", opts->state_dir, "State directory")->capture_default_str();
  stop->fallthrough();
  stop->callback([opts] {
    Status st = StopService(opts->state_dir + "/agent.json", "the agent", std::chrono::seconds(60));
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
    std::printf("agent on %s stopped\n", opts->state_dir.c_str());
  });
  // The owner's controls, over the agent's local socket (agent/agent_control.h).
  std::vector<CLI::App*> controls;
  const std::pair<const char*, const char*> kControls[] = {
      {"pause", "Pause the agent on --state now (its tasks freeze, then go back)"},
      {"finish", "Let the agent finish the tasks it holds, take no more, then pause"},
      {"resume", "Let a paused or finishing agent work again"},
      {"status", "Say what the agent does, and why it is not working if it is not"}};
  for (const auto& [word, help] : kControls) {
    auto* c = cmd->add_subcommand(word, help);
    c->add_option("--state", opts->state_dir, "State directory")->capture_default_str();
    c->fallthrough();
    const std::string command = word;
    c->callback([opts, command] {
      auto answer = SendAgentControl(opts->state_dir, command);
      if (!answer.ok()) throw CLI::RuntimeError(Fail(answer.status()));
      auto j = nlohmann::json::parse(*answer, nullptr, false);
      if (!j.is_object()) throw CLI::RuntimeError(Fail(InvalidArgument("agent answered: " + *answer)));
      const std::string requested = j.value("requested", "none");
      if (command == "pause") std::printf("pausing the agent on %s\n", opts->state_dir.c_str());
      if (command == "finish") {
        std::printf("the agent on %s finishes its tasks, then pauses\n", opts->state_dir.c_str());
      }
      if (command == "resume") std::printf("resuming the agent on %s\n", opts->state_dir.c_str());
      std::printf("agent %s: %s", j.value("agent", "").c_str(), j.value("state", "").c_str());
      if (j.contains("why")) std::printf(" (%s)", j["why"].get<std::string>().c_str());
      std::printf("; %d task(s) held, %d slot(s); owner's request: %s\n", j.value("tasks_held", 0),
                  j.value("slots", 0), requested.c_str());
    });
    controls.push_back(c);
  }
  AddAgentService(cmd);
  cmd->fallthrough();
  cmd->callback([=] {
    if (stop->parsed()) return;
    if (cmd->get_subcommand("install")->parsed() || cmd->get_subcommand("uninstall")->parsed()) {
      return;
    }
    for (CLI::App* c : controls) {
      if (c->parsed()) return;
    }
    if (!hours->empty()) {
      if (Status st = ParseHours(*hours, opts.get()); !st.ok()) throw CLI::RuntimeError(Fail(st));
    }
    if (!config->empty()) {
      Status st = ApplyAgentConfig(*config, opts.get(), idle_min.get(), allow_battery.get(),
                                   grace_s.get());
      if (!st.ok()) throw CLI::RuntimeError(Fail(st));
    }
    for (const std::string& d : *datasets) {
      if (Status st = AddDataset(d, opts.get()); !st.ok()) throw CLI::RuntimeError(Fail(st));
    }
    if (!token->empty()) opts->tokens.push_back(*token);
    if (!token_file->empty()) {
      std::ifstream f(*token_file);
      if (!f) throw CLI::RuntimeError(Fail(NotFound("cannot read --token-file " + *token_file)));
      for (std::string line; std::getline(f, line);) {
        if (!line.empty()) opts->tokens.push_back(line);
      }
    }
    opts->availability.min_user_idle = Duration(static_cast<int64_t>(*idle_min * 60e6));
    opts->availability.grace = Duration(static_cast<int64_t>(*grace_s * 1e6));
    opts->availability.require_ac = !*allow_battery;
    opts->limits.memory_bytes = *memory_mb << 20;
    opts->limits.disk_bytes = *disk_mb << 20;
    opts->cache_bytes = *cache_mb << 20;
    if (!ca_file->empty()) {
      auto pem = ReadPemFile(*ca_file);
      if (!pem.ok()) throw CLI::RuntimeError(Fail(pem.status()));
      opts->ca_pem = *pem;
    }
    std::error_code ec;
    std::filesystem::create_directories(opts->state_dir, ec);
    DetachedChild child;
    if (*detach) {
      auto c = Detach(opts->state_dir + "/agent.log", std::chrono::seconds(120));
      if (!c.ok()) throw CLI::RuntimeError(Fail(c.status()));
      child = std::move(c).value();
    }
    // While it runs, STATE/agent.json names its pid (for `claw agent stop`).
    const std::string info = opts->state_dir + "/agent.json";
    opts->on_running = [&child, info, state = opts->state_dir](const std::string& summary) {
      (void)WriteFileAtomically(info, nlohmann::json{{"pid", getpid()}}.dump() + "\n", 0644);
      std::printf("%s\n", summary.c_str());
      std::fflush(stdout);
      child.Ready(summary + "\n  (pid " + std::to_string(getpid()) + ", log " + state +
                  "/agent.log)");
    };
    InstallSignalHandlers();
    auto sensors = sensors_file->empty() ? NewSystemSensors()
                                         : std::make_unique<FileSensors>(*sensors_file);
    Agent agent(*opts, SystemClock::Get(), std::move(sensors), MakeLogger("agent"));
    std::thread watcher([&agent] {
      while (!g_interrupted) usleep(100'000);
      agent.Stop();
    });
    Status st = agent.Run();
    g_interrupted = true;
    watcher.join();
    std::filesystem::remove(info, ec);
    if (!st.ok()) {
      int code = Fail(st);
      child.Failed(code, st.ToString());
      throw CLI::RuntimeError(code);
    }
  });
}

void AddWorker(CLI::App& cli) {
  auto* cmd = cli.add_subcommand("__worker", "");
  cmd->group("");  // hidden: started by agents
  auto limits = std::make_shared<WorkerLimits>();
  auto setup = std::make_shared<WorkerSetup>();
  auto slot = std::make_shared<int>(0);
  cmd->add_option("--memory-bytes", limits->memory_bytes);
  cmd->add_option("--cpu-seconds", limits->cpu_seconds);
  cmd->add_option("--disk-bytes", limits->disk_bytes);
  cmd->add_option("--slot", *slot);
  cmd->add_option("--sandbox-uid", setup->sandbox_uid);
  cmd->add_option("--blob-dir", setup->blob_dir);
  cmd->add_option("--group", setup->group);
  cmd->add_option("--cgroups", setup->group_mode);
  cmd->add_option("--scratch", setup->scratch_dir);
  cmd->add_option("--dataset", setup->datasets);
  cmd->add_option("--misbehave", setup->misbehave);
  // CLI11 writes each option's value through the reference given above
  // during parse(): the callback holds every one of them (a freed --slot
  // once overwrote the blob dir's path).
  cmd->callback([limits, slot, setup] {
    AppRegistry apps = BuiltinApps();
    int rc = RunWorker(apps, *limits, *setup);
    std::exit(rc);
  });
  // Hidden too: the ML runner that workers start in a sandbox for users'
  // TorchScript modules (apps/ml_sandbox.h).
  cli.add_subcommand("__ml-run", "")->group("")->callback([] { std::exit(MlRunMain()); });
}

}  // namespace claw

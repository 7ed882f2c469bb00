// The `claw` command line: parses flags and wires components together.
#include "cli/commands.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "agent/agent.h"
#include "agent/worker_main.h"
#include "apps/registry.h"
#include "cli/client.h"
#include "cli/command_parts.h"
#include "cli/demo.h"
#include "cli/detach.h"
#include "cli/output.h"
#include "cli/uploads.h"
#include "common/crypto.h"
#include "common/files.h"
#include "coordinator/certificates.h"
#include "coordinator/mailer.h"
#include "coordinator/server.h"

namespace claw {

std::atomic<bool> g_interrupted{false};

namespace {
void OnSignal(int) { g_interrupted = true; }
}  // namespace

void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

namespace {
// Exit codes of client commands (docs/operations.md).
constexpr int kExitUsage = 1;
constexpr int kExitJobFailed = 4;  // the job waited for failed or was cancelled
}  // namespace

int Fail(const Status& st) {
  // Messages can carry a task's or an agent's text (a job's error): escaped.
  std::fprintf(stderr, "error: %s\n", TerminalBlock(st.ToString()).c_str());
  return st.code() == StatusCode::kUnavailable ? 3 : 2;
}

std::string DefaultCoordinator() {
  const char* env = std::getenv("CLAW_COORDINATOR");
  return env ? env : "127.0.0.1:7450";
}

Client Connect(const ClientConfig& c) {
  std::string ca;
  if (!c.ca_file.empty()) {
    auto pem = ReadPemFile(c.ca_file);
    if (!pem.ok()) throw CLI::RuntimeError(Fail(pem.status()));
    ca = *pem;
  }
  return Client(c.coordinator, std::chrono::seconds(30), c.api_token, ca);
}

namespace {

void PrintJobHeader() {
  std::printf("%-14s %-10s %-10s %-9s %15s %7s  %s\n", "JOB", "APP", "NAME", "STATE",
              "DONE/TASKS", "RUNNING", "NOTE");
}

// What the NOTE column says: a failed job's error, or why a running job
// waits.
std::string NoteOf(const v1::JobInfo& j) {
  if (!j.error().empty()) return j.error();
  return j.waiting().empty() ? "" : "waiting: " + j.waiting();
}

// One row of the jobs table; the note cut to one line (claw status JOB
// prints it whole).
void PrintJob(const v1::JobInfo& j) {
  std::string tasks = std::to_string(j.tasks_done()) + "/" + std::to_string(j.tasks_total());
  std::printf("%-14s %-10s %-10s %-9s %15s %7u  %s\n", j.job_id().c_str(), j.app().c_str(),
              j.name().empty() ? "-" : OneLine(j.name(), 10).c_str(), j.state().c_str(),
              tasks.c_str(), j.tasks_running(), OneLine(NoteOf(j), 60).c_str());
}

// ---- coordinator ------------------------------------------------------------------

void AddCoordinator(CLI::App& cli) {
  auto* cmd = cli.add_subcommand("coordinator", "Run the coordinator (job intake, scheduling, store)");
  auto opts = std::make_shared<ServerOptions>();
  auto grace_s = std::make_shared<double>(15);
  cmd->add_option("--data", opts->data_dir, "Data directory (SQLite database, tokens)")
      ->capture_default_str();
  cmd->add_option("--host", opts->grpc_host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", opts->grpc_port, "gRPC port (0: any free)")->capture_default_str();
  cmd->add_option("--http-port", opts->http_port, "HTTP API and dashboard port (0: any, -1: off)")
      ->capture_default_str();
  cmd->add_option("--enroll-tokens", opts->enroll_tokens,
                  "Create N one-time agent enrollment tokens in DATA/enroll-tokens");
  cmd->add_option("--session-grace", *grace_s,
                  "Seconds a lost agent's leases wait for it before being re-issued")
      ->capture_default_str();
  cmd->add_option("--sync", opts->sqlite.synchronous, "SQLite synchronous mode: NORMAL or FULL")
      ->capture_default_str();
  cmd->add_flag("--allow-private-webhooks", opts->coordinator.notify.allow_private,
                "Let users' notification targets be loopback or private addresses (a test "
                "setup; by default refused: the coordinator itself, metadata services)");
  cmd->add_option("--smtp", opts->coordinator.notify.smtp.url,
                  "SMTP server for users' email notifications: smtp://HOST:587 (STARTTLS, required) "
                  "or smtps://HOST:465");
  cmd->add_option("--smtp-from", opts->coordinator.notify.smtp.from, "Sender address of notification mail")
      ->capture_default_str();
  cmd->add_option("--smtp-user", opts->coordinator.notify.smtp.user, "SMTP user name (AUTH, over TLS only)");
  auto smtp_password_file = std::make_shared<std::string>();
  cmd->add_option("--smtp-password-file", *smtp_password_file, "File holding the SMTP password")
      ->check(CLI::ExistingFile);
  cmd->add_option("--smtp-ca", opts->coordinator.notify.smtp.ca_file,
                  "PEM file of the CA that signs the SMTP server's certificate (default: the system's)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--insecure-local", opts->insecure_local,
                "No TLS and no API tokens: every client call is the local user (loopback only)");
  cmd->add_option("--tls-name", opts->tls_names,
                  "Extra DNS name or IP address for the server certificate made on first start");
  cmd->add_option("--connections-per-address", opts->max_connections_per_address,
                  "Connections one remote address may hold at once, per port (more are reset; "
                  "raise it for many agents behind one NAT)")
      ->capture_default_str();
  auto handshake_s = std::make_shared<double>(10);
  cmd->add_option("--handshake-timeout", *handshake_s,
                  "Seconds a new connection has to complete its handshake (gRPC) or send its "
                  "request head (HTTP)")
      ->capture_default_str();
  auto min_lease_s = std::make_shared<double>(30);
  cmd->add_option("--min-lease", *min_lease_s,
                  "Seconds of the shortest lease; an agent renews the leases of tasks it still "
                  "runs about every 5 s, for this long each time")
      ->check(CLI::Range(10.0, 3600.0))  // renewals come about every 5 s
      ->capture_default_str();
  auto dash_s = std::make_shared<double>(1);
  cmd->add_option("--dashboard-interval", *dash_s,
                  "Seconds between the dashboard's live updates (at most one per page per interval)")
      ->check(CLI::Range(0.05, 60.0))
      ->capture_default_str();
  auto sample_s = std::make_shared<double>(10);
  cmd->add_option("--history-every", *sample_s,
                  "Seconds between the samples of the network's numbers that the dashboard charts")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  auto history_days = std::make_shared<double>(30);
  cmd->add_option("--history-days", *history_days, "Days the dashboard's history is kept in the store")
      ->check(CLI::Range(0.01, 3660.0))
      ->capture_default_str();
  auto* init = cmd->add_subcommand(
      "init", "Create the coordinator's keys in the data directory (done on first start too)");
  init->add_option("--data", opts->data_dir, "Data directory")->capture_default_str();
  init->add_option("--tls-name", opts->tls_names,
                   "Extra DNS name or IP address for the server certificate (repeatable)");
  init->callback([opts] {
    bool existed = LoadCoordinatorKey(opts->data_dir, false, NullLogger()).ok();
    auto key = LoadCoordinatorKey(opts->data_dir, true, NullLogger());
    if (!key.ok()) throw CLI::RuntimeError(Fail(key.status()));
    auto tls = LoadOrCreateTls(opts->data_dir, opts->tls_names, true, NullLogger());
    if (!tls.ok()) throw CLI::RuntimeError(Fail(tls.status()));
    const char* d = opts->data_dir.c_str();
    std::printf("%s %s\n"
                "  %s/coordinator.key  signs assignments; public key %s\n"
                "  %s/ca.pem           the CA that agents and clients pin (--ca): copy it to them\n"
                "  %s/server.pem       the TLS certificate (localhost, 127.0.0.1 and --tls-name)\n",
                existed ? "already initialised:" : "initialised", d, d,
                ToHex(key->substr(32)).c_str(), d, d);
  });
  auto* stop = cmd->add_subcommand("stop", "Stop the coordinator running on --data");
  stop->add_option("--data", opts->data_dir, "Data directory")->capture_default_str();
  stop->callback([opts] {
    Status st = StopService(opts->data_dir + "/coordinator.json", "the coordinator",
                            std::chrono::seconds(30));
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
    std::printf("coordinator on %s stopped\n", opts->data_dir.c_str());
  });
  auto detach = std::make_shared<bool>(false);
  cmd->add_flag("--detach", *detach,
                "Run in the background: return once it listens (log in DATA/coordinator.log; "
                "`claw coordinator stop --data DATA` ends it)");
  cmd->fallthrough();
  init->fallthrough();
  stop->fallthrough();
  cmd->callback([opts, grace_s, handshake_s, min_lease_s, dash_s, sample_s, history_days, init, stop,
                 detach, smtp_password_file] {
    if (init->parsed() || stop->parsed()) return;
    auto& smtp = opts->coordinator.notify.smtp;
    if (!smtp.url.empty()) {
      if (smtp.url.rfind("smtp://", 0) != 0 && smtp.url.rfind("smtps://", 0) != 0) {
        throw CLI::ValidationError("--smtp", "an smtp:// or smtps:// URL");
      }
      if (!CheckMailAddress(smtp.from).ok()) {
        throw CLI::ValidationError("--smtp-from", "a plain email address is required with --smtp");
      }
      if (!smtp_password_file->empty()) {
        std::ifstream f(*smtp_password_file);
        std::getline(f, smtp.password);
      }
    }
    opts->dashboard.interval = Duration(static_cast<int64_t>(*dash_s * 1e6));
    opts->dashboard.sample_every = Duration(static_cast<int64_t>(*sample_s * 1e6));
    opts->dashboard.retention = Duration(static_cast<int64_t>(*history_days * 86400e6));
    opts->coordinator.scheduler.min_lease = Duration(static_cast<int64_t>(*min_lease_s * 1e6));
    opts->http_host = opts->grpc_host;
    opts->handshake_timeout = Duration(static_cast<int64_t>(*handshake_s * 1e6));
    opts->coordinator.scheduler.session_grace =
        Duration(static_cast<int64_t>(*grace_s * 1e6));
    DetachedChild child;
    if (*detach) {
      std::error_code ec;
      std::filesystem::create_directories(opts->data_dir, ec);
      auto c = Detach(opts->data_dir + "/coordinator.log", std::chrono::seconds(60));
      if (!c.ok()) throw CLI::RuntimeError(Fail(c.status()));
      child = std::move(c).value();
    }
    AppRegistry apps = BuiltinApps();
    auto server = CoordinatorServer::Start(*opts, &apps, MakeLogger("coordinator"));
    if (!server.ok()) {
      int code = Fail(server.status());
      child.Failed(code, server.status().ToString());
      throw CLI::RuntimeError(code);
    }
    InstallSignalHandlers();
    std::string where = "coordinator: grpc " + (*server)->grpc_target() + "  http " +
                        (*server)->http_url() + "  data " + opts->data_dir;
    std::printf("%s\n", where.c_str());
    std::fflush(stdout);
    child.Ready(where + "  (pid " + std::to_string(getpid()) + ", log " + opts->data_dir +
                "/coordinator.log)");
    while (!g_interrupted) usleep(100'000);
    (*server)->Shutdown();
  });
}


// ---- client commands ----------------------------------------------------------------------

std::string ReadSpec(const std::string& path) {
  if (path == "-") {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  auto text = ReadWholeFile(path);
  if (!text.ok()) throw CLI::RuntimeError(Fail(NotFound("cannot read spec file " + path)));
  return *text;
}

// "k=v": v as JSON when it parses (numbers, true, [..]), else as a string.
nlohmann::json ParseParams(const std::vector<std::string>& kvs) {
  nlohmann::json p = nlohmann::json::object();
  for (const auto& kv : kvs) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw CLI::RuntimeError(Fail(InvalidArgument("--param " + kv + ": expected key=value")));
    }
    std::string v = kv.substr(eq + 1);
    auto j = nlohmann::json::parse(v, nullptr, false);
    p[kv.substr(0, eq)] = j.is_discarded() ? nlohmann::json(v) : j;
  }
  return p;
}

// The model of a finished train or sweep job's best trial, as infer's
// params name it: {"model"} for a built-in model, {"script", "trainable"}
// for a user's module (the file it was trained from, and what it learnt).
nlohmann::json BestModelOf(Client client, const std::string& job) {
  auto r = client.Results(job);
  if (!r.ok()) throw CLI::RuntimeError(Fail(r.status()));
  auto result = nlohmann::json::parse(r->result_json(), nullptr, false);
  if (auto best = BestTrial(result)) {
    const auto& trial = result["trials"][*best];
    if (trial.is_object() && trial.contains("files") && trial["files"].is_array() &&
        !trial["files"].empty() && trial["files"][0].is_object()) {
      std::string file = trial["files"][0].value("sha256", "");
      const auto& params = trial.value("params", nlohmann::json::object());
      if (params.is_object() && params.contains("script")) {
        return {{"script", params["script"]}, {"trainable", file}};
      }
      return {{"model", file}};
    }
  }
  throw CLI::RuntimeError(Fail(NotFound("job " + job + " has no best model (is it a finished "
                                        "train or sweep job that saved models?)")));
}

void AddSubmit(CLI::App& cli, std::shared_ptr<ClientConfig> target) {
  auto* cmd = cli.add_subcommand("submit", "Submit a job (spec file, '-' for stdin, or flags)");
  auto file = std::make_shared<std::string>();
  auto app = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  auto params = std::make_shared<std::vector<std::string>>();
  auto tasks = std::make_shared<int64_t>(-1);
  auto seed = std::make_shared<int64_t>(-1);
  auto wait = std::make_shared<bool>(false);
  auto json = std::make_shared<bool>(false);
  auto ranges = std::make_shared<std::vector<std::string>>();
  auto replication = std::make_shared<int64_t>(-1);
  auto command = std::make_shared<std::vector<std::string>>();
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto outputs = std::make_shared<std::vector<std::string>>();
  auto dataset = std::make_shared<std::string>();
  auto model_of = std::make_shared<std::string>();
  auto script = std::make_shared<std::string>();
  auto data = std::make_shared<std::string>();
  cmd->add_option("spec", *file, "Job spec JSON file, or - for stdin");
  cmd->add_option("--app", *app, "App name (instead of a spec file)");
  cmd->add_option("--name", *name, "Job name");
  cmd->add_option("--param,-p", *params, "App parameter key=value (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--tasks", *tasks, "Number of tasks");
  cmd->add_option("--seed", *seed, "Random seed");
  cmd->add_flag("--wait,-w", *wait, "Show progress and wait for the result");
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->add_option("--range", *ranges,
                  "exec: sweep a variable, name=A..B or name=a,b,c (repeatable: a grid)")
      ->allow_extra_args(false);  // one value each, so that `--` still ends the options
  cmd->add_option("--replication", *replication, "Agents that run each task (quorum: a majority)");
  cmd->add_option("--input,-i", *inputs,
                  "exec: upload FILE (or PATH=FILE) and place it in each task's scratch "
                  "directory (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--dataset", *dataset,
                  "train: upload the Fashion-MNIST IDX files in this directory (e.g. "
                  "/usr/share/datasets/fashion-mnist) as params.dataset");
  cmd->add_option("--script", *script,
                  "train, infer: a TorchScript module file (docs/models.md), checked and "
                  "uploaded as params.script");
  cmd->add_option("--data", *data,
                  "train with --script: upload DIR's train_inputs.npy, train_targets.npy, "
                  "test_inputs.npy and test_targets.npy as params.data; infer: DIR's "
                  "inputs.npy and targets.npy (else test_inputs.npy, test_targets.npy); or an "
                  ".npz archive or .safetensors file holding arrays of those names; or DIR's train.tokens and "
                  "test.tokens (a language model's token files), or train.txt and test.txt "
                  "(UTF-8 text, uploaded as byte tokens; give -p block=N)");
  cmd->add_option("--model-of", *model_of,
                  "infer: use the model of this train or sweep job's best trial (a script "
                  "model: its module and trained parameters)");
  cmd->add_option("--output,-o", *outputs,
                  "exec: collect files matching this glob from each task (repeatable), e.g. "
                  "'*.png'; download them with claw results JOB --out DIR")
      ->allow_extra_args(false);
  cmd->add_option("command", *command,
                  "exec: the command after --, with {name} for swept values, e.g. "
                  "claw submit --app exec --range f=1..24 -- sha256sum /usr/bin/{f}")
      ->expected(-1);
  cmd->fallthrough();
  cmd->callback([=] {
    std::string spec;
    if (!app->empty() && !file->empty()) {
      // With --app, the words after -- are the command, not a spec file.
      command->insert(command->begin(), *file);
      file->clear();
    }
    if (!file->empty()) {
      spec = ReadSpec(*file);
      auto parsed = nlohmann::json::parse(spec, nullptr, false);
      if (parsed.is_object() && UploadScriptPaths(Connect(*target), *file, parsed)) spec = parsed.dump();
      if (!dataset->empty() || !model_of->empty() || !script->empty() || !data->empty()) {
        // fill them into the file's spec
        auto j = nlohmann::json::parse(spec, nullptr, false);
        if (!j.is_object()) throw CLI::RuntimeError(Fail(InvalidArgument(*file + ": not JSON")));
        // A sweep's trials take them from its base.
        nlohmann::json& into = j.value("app", "") == "sweep" ? j["params"]["base"] : j["params"];
        if (!dataset->empty()) into["dataset"] = UploadDataset(Connect(*target), *dataset);
        const bool infer = j.value("app", "") == "infer";
        if (!model_of->empty()) into.update(BestModelOf(Connect(*target), *model_of));
        if (!script->empty()) into["script"] = UploadScript(Connect(*target), *script, !infer);
        if (!data->empty()) into["data"] = UploadArrays(Connect(*target), *data, infer);
        spec = j.dump();
      }
    } else if (!app->empty()) {
      nlohmann::json j = {{"app", *app}, {"params", ParseParams(*params)}};
      if (!name->empty()) j["name"] = *name;
      if (*tasks >= 0) j["tasks"] = *tasks;
      if (*seed >= 0) j["seed"] = *seed;
      if (*replication >= 0) j["replication"] = *replication;
      if (!command->empty()) j["params"]["command"] = *command;
      for (const std::string& r : *ranges) {
        size_t eq = r.find('=');
        if (eq == std::string::npos || eq == 0) {
          throw CLI::RuntimeError(Fail(InvalidArgument("--range " + r + ": expected name=A..B")));
        }
        std::string values = r.substr(eq + 1);
        if (values.find("..") != std::string::npos) {
          j["params"]["sweep"][r.substr(0, eq)] = values;
        } else {
          nlohmann::json list = nlohmann::json::array();
          for (size_t at = 0; at <= values.size();) {
            size_t comma = std::min(values.find(',', at), values.size());
            list.push_back(values.substr(at, comma - at));
            at = comma + 1;
          }
          j["params"]["sweep"][r.substr(0, eq)] = list;
        }
      }
      if (!outputs->empty()) j["params"]["outputs"] = *outputs;
      if (!inputs->empty()) {
        j["params"]["inputs"] = UploadInputs(Connect(*target), *inputs);
      }
      if (!dataset->empty()) j["params"]["dataset"] = UploadDataset(Connect(*target), *dataset);
      const bool infer = *app == "infer";
      if (!model_of->empty()) j["params"].update(BestModelOf(Connect(*target), *model_of));
      if (!script->empty()) j["params"]["script"] = UploadScript(Connect(*target), *script, !infer);
      if (!data->empty()) j["params"]["data"] = UploadArrays(Connect(*target), *data, infer);
      spec = j.dump();
    } else {
      throw CLI::RuntimeError(Fail(InvalidArgument("give a spec file or --app")));
    }
    Client client = Connect(*target);
    auto id = client.Submit(spec);
    if (!id.ok()) throw CLI::RuntimeError(Fail(id.status()));
    PrintPrivacyPlan(spec);
    if (!*wait) {
      if (*json) {
        std::printf("%s\n", nlohmann::json{{"job_id", *id}}.dump().c_str());
      } else {
        std::printf("%s\n", id->c_str());
      }
      return;
    }
    int rc = WaitAndPrint(client, *id, *json);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

void AddQueries(CLI::App& cli, std::shared_ptr<ClientConfig> target) {
  auto json = std::make_shared<bool>(false);
  auto limit = std::make_shared<uint32_t>(50);
  auto* jobs = cli.add_subcommand("jobs", "List recent jobs");
  jobs->add_option("--limit", *limit, "How many")->capture_default_str();
  jobs->add_flag("--json", *json, "Print JSON");
  jobs->fallthrough();
  jobs->callback([=] {
    auto list = Connect(*target).ListJobs(*limit);
    if (!list.ok()) throw CLI::RuntimeError(Fail(list.status()));
    if (*json) {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& j : *list) a.push_back(JobInfoToJson(j));
      std::printf("%s\n", a.dump(2).c_str());
      return;
    }
    if (list->empty()) {
      std::printf("no jobs yet (claw submit starts one)\n");
      return;
    }
    PrintJobHeader();
    for (const auto& j : *list) PrintJob(j);
  });

  auto* agents = cli.add_subcommand("agents", "List enrolled agents and their reputation");
  agents->add_flag("--json", *json, "Print JSON");
  agents->fallthrough();
  agents->callback([=] {
    auto list = Connect(*target).ListAgents();
    if (!list.ok()) throw CLI::RuntimeError(Fail(list.status()));
    if (*json) {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& x : *list) a.push_back(AgentInfoToJson(x));
      std::printf("%s\n", a.dump(2).c_str());
      return;
    }
    if (list->empty()) {
      std::printf("no agents enrolled yet (claw agent --token ... enrolls one)\n");
      return;
    }
    std::printf("%-16s %-10s %-12s %-13s %5s %9s %-9s %8s %8s %7s  %s\n", "AGENT", "OWNER",
                "HOST", "OS/ARCH", "SLOTS", "GFLOPS", "SANDBOX", "VALID", "INVALID", "ERROR",
                "STATE");
    for (const auto& a : *list) {
      std::string osarch = OneLine(a.device().os() + "/" + a.device().arch());
      // The kind of sandbox (the whole text: --json): what binds a task as a whole.
      const std::string& sb = a.device().sandbox();
      const char* kind = sb.rfind("cgroup v2", 0) == 0   ? "cgroup-v2"
                         : sb.rfind("cgroup v1", 0) == 0 ? "cgroup-v1"
                         : sb.rfind("no cgroup", 0) == 0 ? "per-proc"
                                                         : "-";
      std::printf("%-16s %-10.10s %-12.12s %-13.13s %5u %9.2f %-9s %8llu %8llu %6.1f%%  %s%s\n",
                  a.agent_id().c_str(), a.owner().empty() ? "-" : OneLine(a.owner()).c_str(),
                  OneLine(a.device().hostname()).c_str(), osarch.c_str(),
                  a.device().slots(), a.device().flops() / 1e9, kind,
                  static_cast<unsigned long long>(a.valid_results()),
                  static_cast<unsigned long long>(a.invalid_results()), a.error_rate() * 100,
                  a.connected() ? "connected" : "offline", a.on_probation() ? ", probation" : "");
    }
  });

  auto job_id = std::make_shared<std::string>();
  auto* status = cli.add_subcommand("status", "Show one job");
  status->add_option("job", *job_id, "Job id")->required();
  status->add_flag("--json", *json, "Print JSON");
  status->fallthrough();
  status->callback([=] {
    auto info = Connect(*target).GetJob(*job_id);
    if (!info.ok()) throw CLI::RuntimeError(Fail(info.status()));
    if (*json) {
      std::printf("%s\n", JobInfoToJson(*info).dump(2).c_str());
      return;
    }
    PrintJobHeader();
    PrintJob(*info);
    std::string note = NoteOf(*info);
    if (note.find('\n') != std::string::npos || OneLine(note).size() > 60) {
      std::printf("%s:\n  %s\n", info->error().empty() ? "note" : "error",
                  TerminalBlock(info->error().empty() ? info->waiting() : info->error(), "  ")
                      .c_str());
    }
  });

  auto* results = cli.add_subcommand("results", "Print a finished job's result");
  auto out_dir = std::make_shared<std::string>();
  results->add_option("job", *job_id, "Job id")->required();
  results->add_flag("--json", *json, "Print JSON (job and result)");
  results->add_option("--out", *out_dir, "Download the job's output files into this directory");
  auto format = std::make_shared<std::string>("table");
  auto best = std::make_shared<bool>(false);
  results->add_option("--format", *format, "table, csv or json")
      ->check(CLI::IsMember({"table", "csv", "json"}))
      ->capture_default_str();
  results->add_flag("--best", *best, "With --out: only the best trial's files (its model)");
  auto wait_end = std::make_shared<bool>(false);
  results->add_flag("--wait,-w", *wait_end, "Wait for the job to end first (with progress)");
  results->fallthrough();
  results->callback([=] {
    Client client = Connect(*target);
    if (*wait_end) {
      auto last = client.Watch(*job_id, [json](const v1::JobInfo& i) {
        if (!*json) DrawProgress(i);
      });
      if (!last.ok()) throw CLI::RuntimeError(Fail(last.status()));
    }
    auto r = client.Results(*job_id);
    if (!r.ok()) throw CLI::RuntimeError(Fail(r.status()));
    if (r->job().state() != "done") {
      int code = Fail(FailedPrecondition(
          "job " + *job_id + " is " + r->job().state() +
          (r->job().error().empty() ? "" : ": " + OneLine(r->job().error())) + "; no result"));
      throw CLI::RuntimeError(*wait_end ? kExitJobFailed : code);
    }
    if (!out_dir->empty()) {
      auto n = DownloadOutputs(client, r->result_json(), *out_dir, *best);
      if (!n.ok()) throw CLI::RuntimeError(Fail(n.status()));
      return;
    }
    PrintResult(r->job(), r->result_json(), *json || *format == "json", *format == "csv");
  });

  auto* cancel = cli.add_subcommand("cancel", "Cancel a job");
  cancel->add_option("job", *job_id, "Job id")->required();
  cancel->fallthrough();
  cancel->callback([=] {
    auto info = Connect(*target).Cancel(*job_id);
    if (!info.ok()) throw CLI::RuntimeError(Fail(info.status()));
    PrintJobHeader();
    PrintJob(*info);
  });
}


// ---- users ---------------------------------------------------------------------------------

// `token_given`: whether --api-token was on the command line (it then wins
// over the admin-token file, which wins over CLAW_TOKEN: an admin with a
// user's token exported still adds users from the coordinator's machine).
void AddUsers(CLI::App& cli, std::shared_ptr<ClientConfig> target,
              std::function<bool()> token_given) {
  auto* users = cli.add_subcommand("users", "Manage users of the client API (admin)");
  users->require_subcommand(1);
  users->fallthrough();
  auto name = std::make_shared<std::string>();
  auto tier = std::make_shared<std::string>("free");
  auto data = std::make_shared<std::string>("./claw-data");
  auto* add = users->add_subcommand("add", "Create a user and print its API token (shown once)");
  add->add_option("name", *name, "User name (a-z 0-9 . _ -)")->required();
  add->add_option("--tier", *tier, "free, researcher, professional or enterprise")
      ->capture_default_str();
  add->add_option("--data", *data,
                  "Coordinator data directory: the admin's token is read from its admin-token "
                  "unless --api-token is given")
      ->capture_default_str();
  add->fallthrough();
  add->callback([=] {
    ClientConfig c = *target;
    std::string admin_file = *data + "/admin-token";
    std::string source = "--api-token";
    if (!token_given()) {
      std::ifstream f(admin_file);
      if (std::string t; f && std::getline(f, t) && !t.empty()) {
        c.api_token = t;
        source = admin_file;
      } else {
        source = c.api_token.empty() ? "" : "CLAW_TOKEN";
      }
    }
    auto token = Connect(c).AddUser(*name, *tier);
    if (!token.ok()) {
      Status st = token.status();
      if (st.code() == StatusCode::kPermissionDenied || st.code() == StatusCode::kUnauthenticated) {
        st = Status(st.code(),
                    st.message() + " (the token used came from " +
                        (source.empty() ? "nowhere" : source) + "; the admin's is in " +
                        "admin-token in the coordinator's data directory: run this where "
                        "that is, with --data DIR, or pass --api-token)");
      }
      throw CLI::RuntimeError(Fail(st));
    }
    std::printf("%s\n", token->c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "user %s (%s) created; give them the token above (CLAW_TOKEN)\n",
                 name->c_str(), tier->c_str());
  });

  auto ttl = std::make_shared<uint32_t>(86'400);
  auto* enroll = cli.add_subcommand(
      "enroll-token", "Print a one-time token that enrolls one device of yours as an agent");
  enroll->add_option("--ttl", *ttl, "Seconds it stays valid (at most 30 days)")
      ->capture_default_str();
  enroll->fallthrough();
  enroll->callback([=] {
    auto r = Connect(*target).CreateEnrollToken(*ttl);
    if (!r.ok()) throw CLI::RuntimeError(Fail(r.status()));
    std::printf("%s\n", r->token().c_str());
    std::fflush(stdout);
    std::fprintf(stderr,
                 "on the device: claw agent --coordinator %s --token %s%s\n"
                 "its replicas never vote alongside your other devices'\n",
                 target->coordinator.c_str(), r->token().c_str(),
                 target->ca_file.empty() ? "" : (" --ca " + target->ca_file).c_str());
  });
}

}  // namespace

int RunCli(int argc, char** argv) {
  CLI::App cli{"claw: OpenClaw Compute — a compute network of idle machines"};
  cli.require_subcommand(1);
  auto target = std::make_shared<ClientConfig>();
  target->coordinator = DefaultCoordinator();
  if (const char* env = std::getenv("CLAW_TOKEN")) target->api_token = env;
  if (const char* env = std::getenv("CLAW_CA")) target->ca_file = env;
  cli.add_option("--coordinator,-c", target->coordinator,
                 "Coordinator host:port for client commands (env CLAW_COORDINATOR)")
      ->capture_default_str();
  CLI::Option* token_flag = cli.add_option(
      "--api-token", target->api_token,
      "API token for client commands (env CLAW_TOKEN; `claw users add` makes one)");
  cli.add_option("--ca", target->ca_file,
                 "The coordinator's CA certificate to pin (env CLAW_CA; <data>/ca.pem); "
                 "without it, plaintext for --insecure-local");
  AddCoordinator(cli);
  AddAgent(cli);
  AddSubmit(cli, target);
  AddQueries(cli, target);
  AddUsers(cli, target, [token_flag] { return token_flag->count() > 0; });
  AddDemo(cli, &g_interrupted, InstallSignalHandlers);
  AddLedger(cli, target);
  AddUsage(cli, target);
  AddPrivacy(cli);
  AddWorker(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the problem (or the help); a usage error exits with the
    // documented code 1, not CLI11's own (105-ish) codes.
    return cli.exit(e) == 0 ? 0 : kExitUsage;
  }
  return 0;
}

}  // namespace claw

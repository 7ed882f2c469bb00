// What the subcommands of `claw` share, for the files that define them
// (commands.cc: coordinator and client commands; agent_commands.cc: the
// agent and its workers).
#pragma once

#include <CLI/CLI.hpp>

#include <atomic>
#include <memory>
#include <string>

#include "cli/client.h"
#include "common/status.h"

namespace claw {

// Set by SIGINT or SIGTERM once InstallSignalHandlers has run.
extern std::atomic<bool> g_interrupted;
void InstallSignalHandlers();

// Prints the error (escaped) and returns the exit code for it: 3 when the
// coordinator could not be reached, else 2.
int Fail(const Status& st);

// $CLAW_COORDINATOR, else 127.0.0.1:7450.
std::string DefaultCoordinator();

// Where client commands go, from the global options.
struct ClientConfig {
  std::string coordinator;  // host:port of the gRPC API
  std::string api_token;
  std::string ca_file;  // the coordinator's CA to pin; empty: plaintext
  std::string http_url;  // the HTTP API; empty: the coordinator's host, port 7451
};

// A gRPC client of the coordinator, as `c` says (exits with the error for
// an unreadable CA file).
Client Connect(const ClientConfig& c);

// `claw usage`, `claw users set-tier` and `claw why` (usage_commands.cc);
// after AddUsers, whose `users` command it extends.
void AddUsage(CLI::App& cli, std::shared_ptr<ClientConfig> target);

// `claw ledger verify | checkpoint` and `claw credits` (ledger_commands.cc):
// the open ledger and the credit statistics, over the HTTP API.
void AddLedger(CLI::App& cli, std::shared_ptr<ClientConfig> target);

// `claw privacy epsilon | noise` (privacy_commands.cc): the accountant,
// offline.
void AddPrivacy(CLI::App& cli);

// `claw agent` (and `claw agent stop`), and the hidden `claw __worker` that
// agents start.
void AddAgent(CLI::App& cli);
// `claw agent install | uninstall` (agent_service.cc), under `agent`.
void AddAgentService(CLI::App* agent);
void AddWorker(CLI::App& cli);

}  // namespace claw

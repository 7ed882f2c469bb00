// What the subcommands of `claw` share, for the files that define them
// (commands.cc: coordinator and client commands; agent_commands.cc: the
// agent and its workers).
#pragma once

#include <CLI/CLI.hpp>

#include <atomic>
#include <string>

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

// `claw agent` (and `claw agent stop`), and the hidden `claw __worker` that
// agents start.
void AddAgent(CLI::App& cli);
void AddWorker(CLI::App& cli);

}  // namespace claw

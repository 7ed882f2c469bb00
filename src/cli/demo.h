// `claw demo`: the embedded default. One command starts a coordinator and N
// local agents in this process, runs a Monte Carlo job with a live progress
// bar, prints the price beside Black-Scholes and the dashboard address, and
// shuts everything down on completion or Ctrl-C.
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <functional>

namespace claw {

void AddDemo(CLI::App& cli, std::atomic<bool>* interrupted,
             std::function<void()> install_signal_handlers);

}  // namespace claw

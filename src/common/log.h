// Logging: one spdlog logger per component, created here and passed in.
// Messages carry structured fields as key=value ("job=j-1 task=3 agent=a-2").
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace claw {

using Logger = std::shared_ptr<spdlog::logger>;

// A logger named `component` writing to stderr. Level from CLAW_LOG
// ("debug", "info", "warn"; default "info"). Thread-safe.
Logger MakeLogger(const std::string& component);

// A logger that drops everything (for tests and benchmarks).
Logger NullLogger();

}  // namespace claw

#include "common/log.h"

#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace claw {

Logger MakeLogger(const std::string& component) {
  auto logger = std::make_shared<spdlog::logger>(
      component, std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_pattern("%H:%M:%S.%e %^%l%$ [%n] %v");
  const char* level = std::getenv("CLAW_LOG");
  logger->set_level(level ? spdlog::level::from_str(level) : spdlog::level::info);
  return logger;
}

Logger NullLogger() {
  static Logger logger =
      std::make_shared<spdlog::logger>("null", std::make_shared<spdlog::sinks::null_sink_mt>());
  return logger;
}

}  // namespace claw

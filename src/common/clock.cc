#include "common/clock.h"

#include <ctime>

namespace claw {

Time SystemClock::Now() const {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return Time{std::chrono::duration_cast<std::chrono::microseconds>(now).count()};
}

SystemClock* SystemClock::Get() {
  static SystemClock clock;
  return &clock;
}

std::string Iso8601(Time t) {
  const time_t s = static_cast<time_t>(t.unix_ms() / 1000);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace claw

#include "common/clock.h"

namespace claw {

Time SystemClock::Now() const {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return Time{std::chrono::duration_cast<std::chrono::microseconds>(now).count()};
}

SystemClock* SystemClock::Get() {
  static SystemClock clock;
  return &clock;
}

}  // namespace claw

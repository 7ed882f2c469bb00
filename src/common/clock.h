// Clock: the one way to read time. Core logic never reads the wall clock; it
// is handed a Clock (or a Time) by its caller, so tests and the simulator can
// drive hours of behaviour in milliseconds.
//
// Time is microseconds since the Unix epoch for SystemClock and an arbitrary
// origin for FakeClock. Both are thread-safe.
#pragma once

#include <string>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace claw {

using Duration = std::chrono::microseconds;

// A point in time, in microseconds since an origin chosen by the Clock.
struct Time {
  int64_t us = 0;

  friend auto operator<=>(const Time&, const Time&) = default;
  Time operator+(Duration d) const { return Time{us + d.count()}; }
  Time operator-(Duration d) const { return Time{us - d.count()}; }
  Duration operator-(Time o) const { return Duration(us - o.us); }
  int64_t unix_ms() const { return us / 1000; }
  static Time FromUnixMs(int64_t ms) { return Time{ms * 1000}; }
};

// "2026-11-25T16:20:00Z" (UTC, whole seconds).
std::string Iso8601(Time t);

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Time Now() const = 0;
};

// The real clock (system_clock: comparable across processes and restarts,
// which lease deadlines stored in the database require).
class SystemClock final : public Clock {
 public:
  Time Now() const override;
  static SystemClock* Get();  // a process-wide instance; stateless
};

// A clock that moves only when told to. For tests and the simulator.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(Time start = Time{1'000'000'000'000}) : now_(start.us) {}
  Time Now() const override { return Time{now_.load(std::memory_order_relaxed)}; }
  void Advance(Duration d) { now_.fetch_add(d.count(), std::memory_order_relaxed); }
  void Set(Time t) { now_.store(t.us, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> now_;
};

// A monotonic stopwatch for measuring durations (runtimes, benchmarks).
// Not a Clock: it cannot be faked and must not drive decisions in core/.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  int64_t Micros() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now() - start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace claw

// When may the agent use this device? The policy is pure (readings and time
// in, a decision out); the sensors that produce readings sit behind an
// interface with Linux and macOS implementations and a fake for tests.
//
// States:  available --busy--> paused (workers frozen) --busy past grace--> away
//              ^                  |                                          |
//              '------free--------'<------------------free-------------------'
// In `away` the agent hands its leases back and takes no work.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"

namespace claw {

struct SensorReadings {
  double other_cpu = 0;                  // CPU use by others, 0..1 of all cores
  std::optional<Duration> user_idle;     // unset: no interactive user (headless)
  bool on_ac = true;
  bool thermal_throttled = false;
  int local_hour = -1;       // 0..23 on the device's clock; -1: unknown
  double memory_used = 0;    // the machine's memory in use, 0..1 (all processes)
};

class Sensors {
 public:
  virtual ~Sensors() = default;
  // `own` are the agent's and its workers' pids, whose CPU use is not "others'".
  virtual SensorReadings Read(const std::vector<pid_t>& own) = 0;
};

// /proc/stat, /proc/<pid>/stat, utmp ttys' idle time, /sys/class/power_supply,
// /sys/class/thermal. On macOS: IOKit HIDIdleTime, IOPowerSources,
// host_processor_info.
std::unique_ptr<Sensors> NewSystemSensors();

class FakeSensors final : public Sensors {
 public:
  SensorReadings Read(const std::vector<pid_t>&) override { return readings; }
  SensorReadings readings;
};

// Readings from a JSON file, read again on every call, e.g.
//   {"other_cpu": 0.1, "user_idle_s": 600, "on_ac": true}
// (a missing user_idle_s means headless). For rehearsing a policy and for
// end-to-end tests; an unreadable file reads as "user active now".
class FileSensors final : public Sensors {
 public:
  explicit FileSensors(std::string path) : path_(std::move(path)) {}
  SensorReadings Read(const std::vector<pid_t>& own) override;

 private:
  std::string path_;
};

struct AvailabilityOptions {
  bool always = false;                    // dedicated machine: ignore sensors
  double max_other_cpu = 0.30;            // others may use up to this share of the CPU
  Duration min_user_idle = std::chrono::minutes(5);
  bool require_ac = true;
  Duration grace = std::chrono::seconds(30);  // paused this long, then hand work back
  // Work only from this local hour to that one (22 and 7: overnight); equal:
  // any time.
  int from_hour = 0;
  int to_hour = 0;
  // Stop while the machine's memory in use is above this share (1: never).
  double max_memory_used = 1.0;
};

// What the device's owner asked for (`claw agent pause | finish | resume`);
// it holds even on a dedicated machine (`always`).
enum class OwnerControl { kNone, kPaused, kFinishing };
const char* OwnerControlName(OwnerControl c);

enum class Availability { kAvailable, kPaused, kAway };
const char* AvailabilityName(Availability a);

class AvailabilityPolicy {
 public:
  explicit AvailabilityPolicy(AvailabilityOptions options) : options_(options) {}
  // Feeds one reading; returns the state to be in now.
  Availability Update(const SensorReadings& r, Time now);
  // kPaused makes the device busy ("paused by its owner") at the next
  // Update; kFinishing keeps it available but the agent asks for no new
  // work (Agent), and pauses once what it holds is done.
  void SetControl(OwnerControl c) { control_ = c; }
  OwnerControl control() const { return control_; }
  Availability state() const { return state_; }
  // Why the device is not available (for logs); empty when it is.
  const std::string& reason() const { return reason_; }

 private:
  std::string BusyReason(const SensorReadings& r) const;
  AvailabilityOptions options_;
  OwnerControl control_ = OwnerControl::kNone;
  Availability state_ = Availability::kAvailable;
  Time busy_since_;
  std::string reason_;
};

}  // namespace claw

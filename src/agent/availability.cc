#include "agent/availability.h"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

namespace claw {

SensorReadings FileSensors::Read(const std::vector<pid_t>&) {
  SensorReadings r;
  std::ifstream f(path_);
  auto j = nlohmann::json::parse(f, nullptr, false);
  if (!f || !j.is_object()) {
    r.user_idle = Duration(0);
    return r;
  }
  try {
    r.other_cpu = j.value("other_cpu", 0.0);
    if (j.contains("user_idle_s") && j["user_idle_s"].is_number()) {
      r.user_idle = Duration(static_cast<int64_t>(j["user_idle_s"].get<double>() * 1e6));
    }
    r.on_ac = j.value("on_ac", true);
    r.thermal_throttled = j.value("thermal_throttled", false);
    r.local_hour = j.value("local_hour", -1);
    r.memory_used = j.value("memory_used", 0.0);
  } catch (const nlohmann::json::exception&) {  // a field of the wrong type
    r = SensorReadings{};
    r.user_idle = Duration(0);
  }
  return r;
}

const char* AvailabilityName(Availability a) {
  switch (a) {
    case Availability::kAvailable: return "available";
    case Availability::kPaused: return "paused";
    case Availability::kAway: return "away";
  }
  return "?";
}

const char* OwnerControlName(OwnerControl c) {
  switch (c) {
    case OwnerControl::kNone: return "none";
    case OwnerControl::kPaused: return "paused";
    case OwnerControl::kFinishing: return "finishing";
  }
  return "?";
}

std::string AvailabilityPolicy::BusyReason(const SensorReadings& r) const {
  if (control_ == OwnerControl::kPaused) return "paused by its owner";
  if (options_.always) return "";
  char buf[96];
  if (options_.from_hour != options_.to_hour && r.local_hour >= 0) {
    const int h = r.local_hour;
    const bool inside = options_.from_hour < options_.to_hour
                            ? h >= options_.from_hour && h < options_.to_hour
                            : h >= options_.from_hour || h < options_.to_hour;
    if (!inside) {
      std::snprintf(buf, sizeof buf, "outside its hours (%02d:00 to %02d:00; now %02d:xx)",
                    options_.from_hour, options_.to_hour, h);
      return buf;
    }
  }
  if (r.memory_used > options_.max_memory_used) {
    std::snprintf(buf, sizeof buf, "over the memory cap (%.0f%% in use, cap %.0f%%)",
                  r.memory_used * 100, options_.max_memory_used * 100);
    return buf;
  }
  if (r.other_cpu > options_.max_other_cpu) {
    std::snprintf(buf, sizeof buf, "others use %.0f%% CPU (limit %.0f%%)", r.other_cpu * 100,
                  options_.max_other_cpu * 100);
    return buf;
  }
  if (r.user_idle && *r.user_idle < options_.min_user_idle) {
    std::snprintf(buf, sizeof buf, "user active %lld s ago",
                  static_cast<long long>(r.user_idle->count() / 1'000'000));
    return buf;
  }
  if (options_.require_ac && !r.on_ac) return "on battery";
  if (r.thermal_throttled) return "thermally throttled";
  return "";
}

Availability AvailabilityPolicy::Update(const SensorReadings& r, Time now) {
  reason_ = BusyReason(r);
  if (reason_.empty()) {
    state_ = Availability::kAvailable;
    return state_;
  }
  if (state_ == Availability::kAvailable) {
    state_ = Availability::kPaused;
    busy_since_ = now;
  } else if (state_ == Availability::kPaused && now - busy_since_ >= options_.grace) {
    state_ = Availability::kAway;
  }
  return state_;
}

}  // namespace claw

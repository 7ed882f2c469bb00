// Linux sensors. Not compiled on macOS (see sensors_macos.cc).
#ifndef __APPLE__

#include <sys/stat.h>
#include <unistd.h>
#include <utmpx.h>

#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#ifdef CLAW_HAVE_LOGIND
#include <systemd/sd-bus.h>
#include <systemd/sd-login.h>
#endif

#include "agent/availability.h"

namespace claw {
namespace {

// Jiffies busy and total over all CPUs, from the first line of /proc/stat.
bool ReadCpuTotals(uint64_t* busy, uint64_t* total) {
  std::ifstream f("/proc/stat");
  std::string cpu;
  uint64_t user, nice, system, idle, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal)) {
    return false;
  }
  *busy = user + nice + system + irq + softirq + steal;
  *total = *busy + idle + iowait;
  return true;
}

// utime + stime of one process, in jiffies (0 if it is gone).
uint64_t ProcessJiffies(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return 0;
  size_t close = line.rfind(')');  // the command may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return utime + stime;
}

#ifdef CLAW_HAVE_LOGIND
// logind's view, which covers graphical sessions: the number of user
// sessions (sd-login), and the manager's IdleHint / IdleSinceHint (D-Bus),
// true only when every session is idle. Nothing when logind is not running.
std::optional<std::optional<Duration>> LogindUserIdle() {
  char** sessions = nullptr;
  int n = sd_get_sessions(&sessions);
  if (n < 0) return std::nullopt;
  int users = 0;
  for (int i = 0; i < n; ++i) {
    char* cls = nullptr;
    if (sd_session_get_class(sessions[i], &cls) >= 0 && std::string_view(cls) == "user") ++users;
    free(cls);
    free(sessions[i]);
  }
  free(sessions);
  if (users == 0) return std::optional<Duration>();  // headless: nobody to disturb
  sd_bus* bus = nullptr;
  if (sd_bus_default_system(&bus) < 0) return std::nullopt;
  int hint = 0;
  uint64_t since_us = 0;
  sd_bus_error err = SD_BUS_ERROR_NULL;
  int r = sd_bus_get_property_trivial(bus, "org.freedesktop.login1", "/org/freedesktop/login1",
                                      "org.freedesktop.login1.Manager", "IdleHint", &err, 'b',
                                      &hint);
  sd_bus_error_free(&err);
  if (r >= 0 && hint) {
    r = sd_bus_get_property_trivial(bus, "org.freedesktop.login1", "/org/freedesktop/login1",
                                    "org.freedesktop.login1.Manager", "IdleSinceHint", &err, 't',
                                    &since_us);
    sd_bus_error_free(&err);
  }
  sd_bus_unref(bus);
  if (r < 0) return std::nullopt;
  if (!hint) return std::optional<Duration>(Duration(0));  // someone is active
  auto now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  return std::optional<Duration>(Duration(std::max<int64_t>(0, now_us - int64_t(since_us))));
}
#endif

// The shortest idle time of any logged-in terminal (as `w` shows it), or
// nothing when nobody is logged in (a headless server counts as idle).
std::optional<Duration> TerminalUserIdle() {
  std::optional<Duration> idle;
  time_t now = time(nullptr);
  setutxent();
  while (utmpx* u = getutxent()) {
    if (u->ut_type != USER_PROCESS || u->ut_line[0] == '\0') continue;
    std::string dev = std::string("/dev/") + u->ut_line;
    struct stat st;
    if (stat(dev.c_str(), &st) != 0) continue;
    Duration d = std::chrono::seconds(std::max<time_t>(0, now - st.st_atime));
    if (!idle || d < *idle) idle = d;
  }
  endutxent();
  return idle;
}

std::optional<Duration> UserIdle() {
#ifdef CLAW_HAVE_LOGIND
  if (auto idle = LogindUserIdle()) return *idle;
#endif
  return TerminalUserIdle();
}

std::string ReadLine(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::string s;
  std::getline(f, s);
  return s;
}

// On AC unless a battery exists and no mains supply is online.
bool OnAc() {
  bool battery = false, mains_online = false, mains = false;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/power_supply", ec)) {
    std::string type = ReadLine(e.path() / "type");
    if (type == "Battery") battery = true;
    if (type == "Mains" || type == "USB") {
      mains = true;
      mains_online = mains_online || ReadLine(e.path() / "online") == "1";
    }
  }
  if (!battery) return true;
  return mains && mains_online;
}

bool ThermallyThrottled() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/thermal", ec)) {
    if (e.path().filename().string().rfind("thermal_zone", 0) != 0) continue;
    std::string t = ReadLine(e.path() / "temp");
    if (!t.empty() && std::atol(t.c_str()) >= 90'000) return true;  // millidegrees C
  }
  return false;
}

class LinuxSensors final : public Sensors {
 public:
  SensorReadings Read(const std::vector<pid_t>& own) override {
    SensorReadings r;
    uint64_t busy = 0, total = 0, mine = 0;
    for (pid_t p : own) mine += ProcessJiffies(p);
    if (ReadCpuTotals(&busy, &total) && have_last_ && total > last_total_) {
      double others = static_cast<double>(busy - last_busy_) -
                      static_cast<double>(mine >= last_mine_ ? mine - last_mine_ : 0);
      r.other_cpu = std::max(0.0, others / static_cast<double>(total - last_total_));
    }
    have_last_ = true;
    last_busy_ = busy;
    last_total_ = total;
    last_mine_ = mine;
    r.user_idle = UserIdle();
    r.on_ac = OnAc();
    r.thermal_throttled = ThermallyThrottled();
    r.memory_used = MemoryUsed();
    return r;
  }

  // 1 - MemAvailable / MemTotal from /proc/meminfo; 0 if unreadable.
  static double MemoryUsed() {
    std::ifstream f("/proc/meminfo");
    std::string key;
    double total = 0, available = -1, value = 0;
    std::string unit;
    while (f >> key >> value >> unit) {
      if (key == "MemTotal:") total = value;
      if (key == "MemAvailable:") available = value;
    }
    return total > 0 && available >= 0 ? std::clamp(1 - available / total, 0.0, 1.0) : 0;
  }

 private:
  bool have_last_ = false;
  uint64_t last_busy_ = 0, last_total_ = 0, last_mine_ = 0;
};

}  // namespace

std::unique_ptr<Sensors> NewSystemSensors() { return std::make_unique<LinuxSensors>(); }

}  // namespace claw

#endif  // !__APPLE__

// macOS sensors: IOKit for user idle time and power source, Mach for CPU load.
// Written against Apple's documented APIs; not built or run in CI (Linux).
#ifdef __APPLE__

#include <CoreFoundation/CoreFoundation.h>
#include <IOKit/IOKitLib.h>
#include <IOKit/ps/IOPSKeys.h>
#include <IOKit/ps/IOPowerSources.h>
#include <mach/mach.h>
#include <libproc.h>

#include "agent/availability.h"

namespace claw {
namespace {

std::optional<Duration> HidIdle() {
  io_iterator_t iter = 0;
  if (IOServiceGetMatchingServices(kIOMainPortDefault, IOServiceMatching("IOHIDSystem"), &iter) !=
      KERN_SUCCESS) {
    return std::nullopt;
  }
  std::optional<Duration> idle;
  if (io_registry_entry_t entry = IOIteratorNext(iter)) {
    CFTypeRef prop = IORegistryEntryCreateCFProperty(entry, CFSTR("HIDIdleTime"),
                                                     kCFAllocatorDefault, 0);
    int64_t ns = 0;
    if (prop && CFGetTypeID(prop) == CFNumberGetTypeID() &&
        CFNumberGetValue(static_cast<CFNumberRef>(prop), kCFNumberSInt64Type, &ns)) {
      idle = Duration(ns / 1000);
    }
    if (prop) CFRelease(prop);
    IOObjectRelease(entry);
  }
  IOObjectRelease(iter);
  return idle;
}

bool OnAc() {
  CFTypeRef info = IOPSCopyPowerSourcesInfo();
  if (!info) return true;
  CFStringRef type = IOPSGetProvidingPowerSourceType(info);
  bool ac = !type || CFStringCompare(type, CFSTR(kIOPMACPowerKey), 0) == kCFCompareEqualTo;
  CFRelease(info);
  return ac;
}

uint64_t ProcessCpuNs(pid_t pid) {
  proc_taskinfo ti;
  if (proc_pidinfo(pid, PROC_PIDTASKINFO, 0, &ti, sizeof ti) != sizeof ti) return 0;
  return ti.pti_total_user + ti.pti_total_system;
}

class MacSensors final : public Sensors {
 public:
  SensorReadings Read(const std::vector<pid_t>& own) override {
    SensorReadings r;
    host_cpu_load_info_data_t load;
    mach_msg_type_number_t count = HOST_CPU_LOAD_INFO_COUNT;
    if (host_statistics(mach_host_self(), HOST_CPU_LOAD_INFO,
                        reinterpret_cast<host_info_t>(&load), &count) == KERN_SUCCESS) {
      uint64_t busy = load.cpu_ticks[CPU_STATE_USER] + load.cpu_ticks[CPU_STATE_SYSTEM] +
                      load.cpu_ticks[CPU_STATE_NICE];
      uint64_t total = busy + load.cpu_ticks[CPU_STATE_IDLE];
      uint64_t mine_ns = 0;
      for (pid_t p : own) mine_ns += ProcessCpuNs(p);
      if (have_last_ && total > last_total_) {
        double ticks_per_s = static_cast<double>(sysconf(_SC_CLK_TCK));
        double mine_ticks = static_cast<double>(mine_ns - last_mine_ns_) * ticks_per_s / 1e9;
        double others = static_cast<double>(busy - last_busy_) - mine_ticks;
        r.other_cpu = std::max(0.0, others / static_cast<double>(total - last_total_));
      }
      have_last_ = true;
      last_busy_ = busy;
      last_total_ = total;
      last_mine_ns_ = mine_ns;
    }
    r.user_idle = HidIdle();
    r.on_ac = OnAc();
    return r;
  }

 private:
  bool have_last_ = false;
  uint64_t last_busy_ = 0, last_total_ = 0, last_mine_ns_ = 0;
};

}  // namespace

std::unique_ptr<Sensors> NewSystemSensors() { return std::make_unique<MacSensors>(); }

}  // namespace claw

#endif  // __APPLE__

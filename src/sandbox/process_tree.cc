#include "sandbox/process_tree.h"

#include <signal.h>
#include <unistd.h>
#ifdef __APPLE__
#include <libproc.h>
#include <sys/sysctl.h>
#endif

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <unordered_map>

namespace claw {
namespace {

#ifndef __APPLE__
// The parent of a process that has not exited (a zombie's is gone but for
// its parent's wait); false if it has, or is gone. From /proc/PID/stat:
// "pid (comm) state ppid ...", where comm may hold spaces and parentheses.
bool LiveParent(const char* pid, pid_t* ppid) {
  char path[64], buf[512];
  std::snprintf(path, sizeof path, "/proc/%s/stat", pid);
  FILE* f = std::fopen(path, "re");
  if (!f) return false;
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');
  char state = 0;
  int parent = 0;
  if (!close || std::sscanf(close + 1, " %c %d", &state, &parent) != 2) return false;
  *ppid = parent;
  return state != 'Z' && state != 'X';
}
#endif

// pid -> parent pid of every process.
std::unordered_map<pid_t, pid_t> Parents() {
  std::unordered_map<pid_t, pid_t> parents;
#ifdef __APPLE__
  int mib[3] = {CTL_KERN, KERN_PROC, KERN_PROC_ALL};
  size_t bytes = 0;
  if (sysctl(mib, 3, nullptr, &bytes, nullptr, 0) != 0) return parents;
  std::vector<kinfo_proc> procs(bytes / sizeof(kinfo_proc) + 16);
  bytes = procs.size() * sizeof(kinfo_proc);
  if (sysctl(mib, 3, procs.data(), &bytes, nullptr, 0) != 0) return parents;
  for (size_t i = 0; i < bytes / sizeof(kinfo_proc); ++i) {
    parents[procs[i].kp_proc.p_pid] = procs[i].kp_eproc.e_ppid;
  }
#else
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    pid_t ppid = 0;
    if (LiveParent(name.c_str(), &ppid)) parents[static_cast<pid_t>(std::atoi(name.c_str()))] = ppid;
  }
#endif
  return parents;
}

}  // namespace

std::vector<pid_t> Descendants(const std::vector<pid_t>& roots) {
  std::unordered_map<pid_t, std::vector<pid_t>> children;
  for (const auto& [pid, ppid] : Parents()) children[ppid].push_back(pid);
  std::vector<pid_t> out, stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    pid_t p = stack.back();
    stack.pop_back();
    auto it = children.find(p);
    if (it == children.end()) continue;
    for (pid_t c : it->second) {
      out.push_back(c);
      stack.push_back(c);
    }
  }
  return out;
}

bool Alive(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == EPERM;
#ifdef __APPLE__
  proc_bsdinfo info;
  if (proc_pidinfo(pid, PROC_PIDTBSDINFO, 0, &info, sizeof info) != sizeof info) return false;
  return info.pbi_status != SZOMB;
#else
  pid_t ppid = 0;
  return LiveParent(std::to_string(pid).c_str(), &ppid);
#endif
}

uint64_t ProcessCpuMicros(pid_t pid) {
#ifdef __APPLE__
  proc_taskinfo info;
  if (proc_pidinfo(pid, PROC_PIDTASKINFO, 0, &info, sizeof info) != sizeof info) return 0;
  return (info.pti_total_user + info.pti_total_system) / 1000;  // ns
#else
  char path[64], buf[1024];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "re");
  if (!f) return 0;
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');
  if (!close) return 0;
  // Fields 14-17 (utime stime cutime cstime), counted from "state" as 3.
  unsigned long long v[4] = {};
  if (std::sscanf(close + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu",
                  &v[0], &v[1], &v[2], &v[3]) != 4) {
    return 0;
  }
  static const long ticks = sysconf(_SC_CLK_TCK);
  return (v[0] + v[1] + v[2] + v[3]) * 1'000'000ULL / static_cast<unsigned long long>(ticks);
#endif
}

void SignalDescendants(pid_t root, int sig) {
  for (int pass = 0; pass < 2; ++pass) {
    for (pid_t p : Descendants({root})) kill(p, sig);
  }
}

}  // namespace claw

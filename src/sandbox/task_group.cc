#include "sandbox/task_group.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "sandbox/process_tree.h"

namespace claw {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Writes `text` to a cgroup file; 0 or the errno.
int WriteValue(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = write(fd, text.data(), text.size());
  int err = n == static_cast<ssize_t>(text.size()) ? 0 : (n < 0 ? errno : EIO);
  close(fd);
  return err;
}

std::string ReadValue(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The number after `key` in a "key value" file (memory.events, cpu.stat).
uint64_t KeyedValue(const std::string& path, const std::string& key) {
  std::istringstream in(ReadValue(path));
  std::string k;
  uint64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

std::vector<pid_t> Pids(const std::string& procs_file) {
  std::istringstream in(ReadValue(procs_file));
  std::vector<pid_t> pids;
  for (pid_t p; in >> p;) pids.push_back(p);
  return pids;
}

// Writes the decimal pid of the caller to `fd`: async-signal-safe.
bool WriteSelf(int fd) noexcept {
  char buf[24];
  int n = 0;
  for (unsigned long v = static_cast<unsigned long>(getpid()); v > 0 || n == 0; v /= 10) {
    buf[sizeof buf - 1 - n++] = static_cast<char>('0' + v % 10);
  }
  return write(fd, buf + sizeof buf - n, static_cast<size_t>(n)) == n;
}

struct Mount {
  std::string root;        // the mount's root within its hierarchy
  std::string point;       // where it is mounted
  std::string type;        // cgroup or cgroup2
  std::vector<std::string> options;  // super options: the v1 controllers
};

std::vector<Mount> CgroupMounts() {
  std::vector<Mount> out;
  std::ifstream f("/proc/self/mountinfo");
  for (std::string line; std::getline(f, line);) {
    std::istringstream in(line);
    std::string id, parent, dev, root, point, opts;
    in >> id >> parent >> dev >> root >> point >> opts;
    std::string field;
    while (in >> field && field != "-") {
    }
    std::string type, source, super;
    in >> type >> source >> super;
    if (type != "cgroup" && type != "cgroup2") continue;
    Mount m{root, point, type, {}};
    std::istringstream s(super);
    for (std::string o; std::getline(s, o, ',');) m.options.push_back(o);
    out.push_back(std::move(m));
  }
  return out;
}

// This process's cgroup in each hierarchy: "memory" -> "/a/b", and "" for
// the unified one.
std::map<std::string, std::string> OwnCgroups() {
  std::map<std::string, std::string> out;
  std::ifstream f("/proc/self/cgroup");
  for (std::string line; std::getline(f, line);) {
    size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      out[""] = path;
      continue;
    }
    std::istringstream s(controllers);
    for (std::string c; std::getline(s, c, ',');) out[c] = path;
  }
  return out;
}

// The directory of `own` (this process's cgroup path) under mount `m`.
std::string DirUnder(const Mount& m, const std::string& own) {
  std::string rel = own;
  // `own` below the mount's root ("/a/b" under "/a", not "/ab"): the rest.
  if (m.root != "/" && rel.rfind(m.root, 0) == 0 &&
      (rel.size() == m.root.size() || rel[m.root.size()] == '/')) {
    rel = rel.substr(m.root.size());
    if (rel.empty()) rel = "/";
  }
  return m.point + (rel == "/" ? "" : rel);
}

// The leaf MakeV2 moves the agent's processes to, when their cgroup must
// hold task groups below it.
constexpr std::string_view kAgentLeaf = "claw-agent";

// A cgroup v2 path of this process, as far as groups are concerned: once
// moved to its leaf, the leaf's parent.
std::string WithoutAgentLeaf(std::string path) {
  const std::string suffix = "/" + std::string(kAgentLeaf);
  if (path.size() > suffix.size() &&
      path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
    path.resize(path.size() - suffix.size());
  }
  return path;
}

bool Writable(const std::string& dir) { return access(dir.c_str(), W_OK) == 0; }

// ---- the process tree -------------------------------------------------------------

class ProcessTreeGroup final : public TaskGroup {
 public:
  ProcessTreeGroup(pid_t root, std::string why) : root_(root), why_(std::move(why)) {}
  std::string Describe() const override {
    return "no cgroup (" + why_ +
           "): a task's processes are found as descendants of its worker; memory and "
           "processes are limited per process only";
  }
  bool BindsMemory() const override { return false; }
  bool BindsProcesses() const override { return false; }
  void SetLimits(const GroupLimits&) override {}
  bool EnterAfterFork() noexcept override { return true; }
  void Freeze() override { SignalDescendants(root_, SIGSTOP); }
  void Thaw() override { SignalDescendants(root_, SIGCONT); }
  bool KillAll(milliseconds wait) override {
    auto until = steady_clock::now() + wait;
    while (true) {
      std::vector<pid_t> left = Descendants({root_});
      if (left.empty()) return true;
      for (pid_t p : left) {
        kill(p, SIGKILL);
        kill(p, SIGCONT);
      }
      if (steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(milliseconds(10));
    }
  }
  std::vector<pid_t> Processes() override { return Descendants({root_}); }
  uint64_t CpuMicros() override {
    uint64_t sum = 0;
    for (pid_t p : Descendants({root_})) sum += ProcessCpuMicros(p);
    return sum;
  }
  uint64_t OomKills() override { return 0; }

 private:
  pid_t root_;
  std::string why_;
};

// ---- cgroup v1 -------------------------------------------------------------------------

class V1Group final : public TaskGroup {
 public:
  // dirs: controller -> directory (made); procs: open cgroup.procs of each
  // distinct directory.
  V1Group(std::map<std::string, std::string> dirs) : dirs_(std::move(dirs)) {
    std::vector<std::string> seen;
    for (const auto& [c, d] : dirs_) {
      if (std::find(seen.begin(), seen.end(), d) != seen.end()) continue;
      seen.push_back(d);
      int fd = open((d + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
      if (fd >= 0) procs_.push_back(fd);
    }
  }
  ~V1Group() override {
    for (int fd : procs_) close(fd);
  }
  std::string Describe() const override {
    std::string names;
    for (const auto& [c, d] : dirs_) names += (names.empty() ? "" : ", ") + c;
    std::string d = "cgroup v1 (" + names + ") at " + dirs_.at("memory");
    if (!dirs_.count("cpuacct")) d += "; CPU time counted for live processes only (no cpuacct)";
    return d;
  }
  bool BindsMemory() const override { return true; }
  bool BindsProcesses() const override { return true; }
  void SetLimits(const GroupLimits& l) override {
    const std::string& mem = dirs_.at("memory");
    std::string bytes = l.memory_bytes ? std::to_string(l.memory_bytes) : "-1";
    bool swap = fs::exists(mem + "/memory.memsw.limit_in_bytes");
    // memory <= memory+swap at every step: lift the latter, set both.
    if (swap) WriteValue(mem + "/memory.memsw.limit_in_bytes", "-1");
    WriteValue(mem + "/memory.limit_in_bytes", bytes);
    if (swap) WriteValue(mem + "/memory.memsw.limit_in_bytes", bytes);
    WriteValue(dirs_.at("pids") + "/pids.max",
               l.processes ? std::to_string(l.processes) : std::string("max"));
    if (auto it = dirs_.find("cpu"); it != dirs_.end()) {
      WriteValue(it->second + "/cpu.cfs_period_us", "100000");
      WriteValue(it->second + "/cpu.cfs_quota_us",
                 l.cpu_cores > 0 ? std::to_string(static_cast<int64_t>(l.cpu_cores * 100000))
                                 : std::string("-1"));
    }
  }
  bool EnterAfterFork() noexcept override {
    bool ok = true;
    for (int fd : procs_) ok = WriteSelf(fd) && ok;
    return ok && !procs_.empty();
  }
  void Freeze() override { SetFreezer("FROZEN"); }
  void Thaw() override { SetFreezer("THAWED"); }
  bool KillAll(milliseconds wait) override {
    auto until = steady_clock::now() + wait;
    const std::string procs = dirs_.at("freezer") + "/cgroup.procs";
    while (true) {
      std::vector<pid_t> left = Pids(procs);
      if (left.empty()) return true;
      // Frozen, none can fork while they are killed; they die when thawed.
      Freeze();
      for (pid_t p : Pids(procs)) kill(p, SIGKILL);
      Thaw();
      if (steady_clock::now() >= until) return Pids(procs).empty();
      std::this_thread::sleep_for(milliseconds(5));
    }
  }
  std::vector<pid_t> Processes() override { return Pids(dirs_.at("freezer") + "/cgroup.procs"); }
  uint64_t CpuMicros() override {
    auto it = dirs_.find("cpuacct");
    if (it != dirs_.end()) {
      return std::strtoull(ReadValue(it->second + "/cpuacct.usage").c_str(), nullptr, 10) / 1000;
    }
    // Without cpuacct: the processes alive now (what the dead used is lost;
    // each process's RLIMIT_CPU still holds).
    uint64_t sum = 0;
    for (pid_t p : Processes()) sum += ProcessCpuMicros(p);
    return sum;
  }
  uint64_t OomKills() override {
    return KeyedValue(dirs_.at("memory") + "/memory.oom_control", "oom_kill");
  }

 private:
  void SetFreezer(const char* state) {
    const std::string dir = dirs_.at("freezer");
    WriteValue(dir + "/freezer.state", state);
    auto until = steady_clock::now() + milliseconds(1000);
    while (ReadValue(dir + "/freezer.state").rfind(state, 0) != 0 && steady_clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(1));
      WriteValue(dir + "/freezer.state", state);
    }
  }

  std::map<std::string, std::string> dirs_;
  std::vector<int> procs_;
};

// ---- cgroup v2 -------------------------------------------------------------------------

class V2Group final : public TaskGroup {
 public:
  V2Group(std::string dir, std::vector<std::string> controllers)
      : dir_(std::move(dir)), controllers_(std::move(controllers)) {
    procs_ = open((dir_ + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  }
  ~V2Group() override {
    if (procs_ >= 0) close(procs_);
  }
  std::string Describe() const override {
    std::string names;
    for (const auto& c : controllers_) names += (names.empty() ? "" : ", ") + c;
    std::string d = "cgroup v2 at " + dir_ + " (controllers: " + (names.empty() ? "none" : names) + ")";
    if (!BindsMemory()) d += "; memory is limited per process only";
    if (!BindsProcesses()) d += "; processes are limited per user only";
    return d;
  }
  bool BindsMemory() const override { return Has("memory"); }
  bool BindsProcesses() const override { return Has("pids"); }
  void SetLimits(const GroupLimits& l) override {
    if (Has("memory")) {
      WriteValue(dir_ + "/memory.max", l.memory_bytes ? std::to_string(l.memory_bytes) : "max");
      WriteValue(dir_ + "/memory.swap.max", "0");
    }
    if (Has("pids")) {
      WriteValue(dir_ + "/pids.max", l.processes ? std::to_string(l.processes) : "max");
    }
    if (Has("cpu")) {
      WriteValue(dir_ + "/cpu.max",
                 l.cpu_cores > 0
                     ? std::to_string(static_cast<int64_t>(l.cpu_cores * 100000)) + " 100000"
                     : std::string("max 100000"));
    }
  }
  bool EnterAfterFork() noexcept override { return procs_ >= 0 && WriteSelf(procs_); }
  void Freeze() override { SetFrozen(true); }
  void Thaw() override { SetFrozen(false); }
  bool KillAll(milliseconds wait) override {
    auto until = steady_clock::now() + wait;
    const std::string procs = dir_ + "/cgroup.procs";
    while (true) {
      std::vector<pid_t> left = Pids(procs);
      if (left.empty()) return true;
      if (WriteValue(dir_ + "/cgroup.kill", "1") != 0) {  // before Linux 5.14
        SetFrozen(true);
        for (pid_t p : Pids(procs)) kill(p, SIGKILL);
        SetFrozen(false);
      }
      if (steady_clock::now() >= until) return Pids(procs).empty();
      std::this_thread::sleep_for(milliseconds(5));
    }
  }
  std::vector<pid_t> Processes() override { return Pids(dir_ + "/cgroup.procs"); }
  uint64_t CpuMicros() override { return KeyedValue(dir_ + "/cpu.stat", "usage_usec"); }
  uint64_t OomKills() override {
    return Has("memory") ? KeyedValue(dir_ + "/memory.events", "oom_kill") : 0;
  }

 private:
  bool Has(const std::string& c) const {
    return std::find(controllers_.begin(), controllers_.end(), c) != controllers_.end();
  }
  void SetFrozen(bool frozen) {
    WriteValue(dir_ + "/cgroup.freeze", frozen ? "1" : "0");
    auto until = steady_clock::now() + milliseconds(1000);
    const std::string want = frozen ? "frozen 1" : "frozen 0";
    while (ReadValue(dir_ + "/cgroup.events").find(want) == std::string::npos &&
           steady_clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(1));
    }
  }

  std::string dir_;
  std::vector<std::string> controllers_;
  int procs_ = -1;
};

// Makes `dir` (and its parents below `base`), enabling `wanted` controllers
// on the way down where they are available. Returns the controllers the
// leaf has, or an error text.
std::string MakeV2(const std::string& base, const std::string& name,
                   std::vector<std::string>* controllers) {
  std::istringstream available(ReadValue(base + "/cgroup.controllers"));
  std::vector<std::string> wanted;
  for (std::string c; available >> c;) {
    if (c == "memory" || c == "pids" || c == "cpu") wanted.push_back(c);
  }
  std::string dir = base;
  std::istringstream parts(name);
  for (std::string part; std::getline(parts, part, '/');) {
    // Controllers for the children of `dir`. cgroup v2 allows them only
    // where `dir` holds no process itself: its processes (this agent, when
    // `base` is the cgroup it was started in) move to a leaf first.
    std::string enable;
    for (const auto& c : wanted) enable += (enable.empty() ? "+" : " +") + c;
    if (!enable.empty() && WriteValue(dir + "/cgroup.subtree_control", enable) == EBUSY) {
      std::string leaf = dir + "/" + std::string(kAgentLeaf);
      mkdir(leaf.c_str(), 0755);
      for (pid_t p : Pids(dir + "/cgroup.procs")) WriteValue(leaf + "/cgroup.procs", std::to_string(p));
      WriteValue(dir + "/cgroup.subtree_control", enable);
    }
    std::istringstream enabled(ReadValue(dir + "/cgroup.subtree_control"));
    wanted.clear();
    for (std::string c; enabled >> c;) wanted.push_back(c);
    dir += "/" + part;
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return "cannot make " + dir + ": " + strerror(errno);
    }
  }
  *controllers = wanted;
  return "";
}

std::string V2Base(std::string* why) {
  auto own = OwnCgroups();
  for (const Mount& m : CgroupMounts()) {
    if (m.type != "cgroup2") continue;
    if (!own.count("")) break;
    std::string base = DirUnder(m, WithoutAgentLeaf(own[""]));
    if (!Writable(base)) {
      *why = base + " is not writable (not root, and no delegated cgroup)";
      return "";
    }
    return base;
  }
  if (why->empty()) *why = "no cgroup v2 hierarchy";
  return "";
}

// The v1 directories of `name` for each controller, made; empty if the
// required ones (memory, pids, freezer) cannot be.
std::map<std::string, std::string> MakeV1(const std::string& name, std::string* why) {
  auto own = OwnCgroups();
  std::map<std::string, std::string> dirs;
  for (const Mount& m : CgroupMounts()) {
    if (m.type != "cgroup") continue;
    for (const char* c : {"memory", "pids", "freezer", "cpu", "cpuacct"}) {
      if (std::find(m.options.begin(), m.options.end(), c) == m.options.end()) continue;
      if (!own.count(c) || dirs.count(c)) continue;
      std::string dir = DirUnder(m, own[c]) + "/" + name;
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (!ec) dirs[c] = dir;
      else if (why->empty()) *why = "cannot make " + dir + ": " + ec.message();
    }
  }
  for (const char* c : {"memory", "pids", "freezer"}) {
    if (!dirs.count(c)) {
      if (why->empty()) *why = std::string("no cgroup v1 ") + c + " hierarchy";
      return {};
    }
  }
  return dirs;
}

}  // namespace

bool ParseGroupMode(const std::string& text, GroupMode* mode) {
  static const std::map<std::string, GroupMode> kModes = {
      {"auto", GroupMode::kAuto}, {"v2", GroupMode::kV2}, {"v1", GroupMode::kV1},
      {"none", GroupMode::kNone}};
  auto it = kModes.find(text);
  if (it == kModes.end()) return false;
  *mode = it->second;
  return true;
}

std::unique_ptr<TaskGroup> OpenTaskGroup(const std::string& name, pid_t tree_root, GroupMode mode) {
#ifdef __APPLE__
  (void)name;
  (void)mode;
  return std::make_unique<ProcessTreeGroup>(tree_root, "macOS has no cgroups");
#else
  if (mode == GroupMode::kNone) {
    return std::make_unique<ProcessTreeGroup>(tree_root, "cgroups turned off");
  }
  std::string why;
  std::unique_ptr<TaskGroup> group;
  std::unique_ptr<TaskGroup> partial;  // v2 without memory or pids
  if (mode == GroupMode::kAuto || mode == GroupMode::kV2) {
    std::string base = V2Base(&why);
    std::vector<std::string> controllers;
    if (!base.empty()) {
      std::string err = MakeV2(base, name, &controllers);
      if (!err.empty()) {
        why = err;
      } else {
        auto g = std::make_unique<V2Group>(base + "/" + name, controllers);
        if (mode == GroupMode::kV2 || (g->BindsMemory() && g->BindsProcesses())) group = std::move(g);
        else partial = std::move(g);
      }
    }
  }
  if (!group && (mode == GroupMode::kAuto || mode == GroupMode::kV1)) {
    std::string v1_why;
    auto dirs = MakeV1(name, &v1_why);
    if (!dirs.empty()) group = std::make_unique<V1Group>(std::move(dirs));
    else why = v1_why.empty() ? why : v1_why;
  }
  if (!group) group = std::move(partial);
  if (!group) return std::make_unique<ProcessTreeGroup>(tree_root, why);
  group->KillAll();  // what a crashed predecessor left
  group->Thaw();
  return group;
#endif
}

void RemoveTaskGroup(const std::string& name, GroupMode mode) {
  if (mode == GroupMode::kNone) return;
  auto own = OwnCgroups();
  for (const Mount& m : CgroupMounts()) {
    std::string own_path;
    if (m.type == "cgroup2") {
      if (!own.count("")) continue;
      own_path = WithoutAgentLeaf(own[""]);
    } else {
      for (const auto& o : m.options) {
        if (own.count(o)) own_path = own[o];
      }
      if (own_path.empty()) continue;
    }
    std::string base = DirUnder(m, own_path);
    // The leaf, then each parent within `name` that is empty now.
    std::string rel = name;
    while (!rel.empty()) {
      if (rmdir((base + "/" + rel).c_str()) != 0) break;
      size_t slash = rel.rfind('/');
      rel = slash == std::string::npos ? "" : rel.substr(0, slash);
    }
  }
}

}  // namespace claw

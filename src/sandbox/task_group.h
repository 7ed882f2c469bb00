// TaskGroup: every process of one task, held together so that they can be
// limited, frozen, thawed and killed at once, whatever they do (fork,
// daemonize, escape their process group or session).
//
// Three kinds, behind one interface:
//   - cgroup v2 (the unified hierarchy: contributors' Linux machines under
//     systemd): memory.max (tmpfs pages count too), memory.swap.max, pids.max,
//     cpu.max, cgroup.freeze, cgroup.kill, cpu.stat. The group is made under
//     the cgroup this process is in (a delegated subtree: an agent started
//     with `systemd-run --user --scope -p Delegate=yes`, or as root); where
//     that cgroup still holds processes, they are moved into a leaf of
//     their own first (cgroup v2 keeps processes in leaves only).
//   - cgroup v1 (older systems and hybrid mode, as on this project's CI):
//     the memory, pids, freezer, cpu and cpuacct hierarchies, each where it
//     is mounted, under this process's own cgroup there.
//   - a process tree, where no cgroup can be made (an unprivileged
//     container, a read-only /sys, macOS): the group is the descendants of
//     a process; freezing and killing signal each of them, CPU time is
//     summed from them, and memory and processes are bounded only by the
//     rlimits of each process. Describe() says so, and the agent reports it.
//
// A group is reused task after task by the worker of one slot; the agent
// opens the same groups to freeze them when the owner comes back.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace claw {

struct GroupLimits {
  uint64_t memory_bytes = 0;  // processes' memory with their tmpfs files; 0: none
  uint64_t processes = 0;     // 0: none
  double cpu_cores = 0;       // share of the CPU over time; 0: none
};

class TaskGroup {
 public:
  virtual ~TaskGroup() = default;
  // e.g. "cgroup v1 (memory, pids, freezer, cpu, cpuacct)" or
  // "no cgroup (/sys/fs/cgroup is read-only): ...".
  virtual std::string Describe() const = 0;
  // Whether memory (tmpfs included) and the count of processes are bound
  // for the group as a whole, not per process.
  virtual bool BindsMemory() const = 0;
  virtual bool BindsProcesses() const = 0;
  // Sets the limits for what runs next; what this kind cannot bind is left
  // to the rlimits the sandbox sets on each process.
  virtual void SetLimits(const GroupLimits& limits) = 0;
  // Moves the calling process into the group. Async-signal-safe: called in
  // a child between fork and exec. False if it could not.
  virtual bool EnterAfterFork() noexcept = 0;
  virtual void Freeze() = 0;
  virtual void Thaw() = 0;
  // Kills every process in the group and waits until none is left, up to
  // `wait`; false if some remain.
  virtual bool KillAll(std::chrono::milliseconds wait = std::chrono::seconds(5)) = 0;
  // The processes in the group now.
  virtual std::vector<pid_t> Processes() = 0;
  // CPU time used by the group's processes since it was opened (dead ones
  // included where the kind keeps count), in microseconds.
  virtual uint64_t CpuMicros() = 0;
  // How many of its processes the kernel killed for want of memory, so far.
  virtual uint64_t OomKills() = 0;
};

// How groups are made: "auto" (cgroup v2 with the memory and pids
// controllers, else cgroup v1, else v2 without them, else a process tree),
// or one of "v2", "v1", "none" (then a process tree).
enum class GroupMode { kAuto, kV2, kV1, kNone };
bool ParseGroupMode(const std::string& text, GroupMode* mode);

// Opens the group `name` ("claw-<agent>/slot-0"), making it if needed. It
// never fails: where the mode's cgroup cannot be made, the group is the
// process tree under `tree_root`, and Describe() says why.
std::unique_ptr<TaskGroup> OpenTaskGroup(const std::string& name, pid_t tree_root,
                                         GroupMode mode = GroupMode::kAuto);

// Removes the group `name` and its parents up to the agent's (only empty
// ones; a best effort when an agent stops).
void RemoveTaskGroup(const std::string& name, GroupMode mode = GroupMode::kAuto);

}  // namespace claw

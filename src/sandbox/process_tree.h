// The processes descended from a process, read from /proc (Linux) or
// sysctl (macOS): what a sandbox started, wherever it went since (a
// process whose parent died is adopted by the sandbox's PID 1, which is a
// descendant too). The fallback where no cgroup holds a task's processes,
// and how the agent counts the CPU time its own sandboxes use.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

namespace claw {

// Every live descendant of `roots` (not the roots themselves, nor zombies),
// in no order.
std::vector<pid_t> Descendants(const std::vector<pid_t>& roots);

// Whether `pid` is a process that has not exited (not a zombie).
bool Alive(pid_t pid);

// CPU time of the process (user + system, with that of its waited-for
// children), in microseconds; 0 if it is gone.
uint64_t ProcessCpuMicros(pid_t pid);

// Sends `sig` to every descendant of `root`, twice over, so that children
// forked while the first pass ran are reached as well (SIGSTOP, SIGKILL).
void SignalDescendants(pid_t root, int sig);

}  // namespace claw

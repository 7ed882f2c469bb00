// Runs an untrusted command isolated from its host.
//
// Linux: under bubblewrap, with
//   - no network (a loopback of its own), PID, IPC, UTS (hostname
//     "sandbox"), user and cgroup namespaces of its own, and no way to make
//     more (--disable-userns, and the seccomp filter of seccomp_filter.h);
//   - a read-only root of the host's /usr and nothing else of its files;
//     writable only: the scratch directory as /work, and /tmp and /dev/shm
//     (RAM: each sized, and counted in the task's memory);
//   - an empty environment (PATH, HOME=/work, LANG) for the command and for
//     the launcher itself, whose options (the scratch directory's host path
//     among them) travel in a descriptor rather than on its command line;
//   - no descriptor of the agent's but stdin (/dev/null), stdout and stderr;
//   - rlimits on each process (CPU time, address space, file size,
//     processes, no core files);
//   - the task's TaskGroup (a cgroup where one can be made): memory with
//     tmpfs, processes, a CPU share, and the whole tree frozen or killed at
//     once;
//   - watched while it runs: wall-clock time, the CPU time of all its
//     processes together, and the disk it fills in /work; past one of them
//     the whole tree is killed and `killed_for` says which.
//
// The process limit (RLIMIT_NPROC) counts all processes of a user and does
// not bind root, so an agent running as root runs each sandbox as an
// unprivileged user of its own (uid kSandboxUidBase + a number per worker
// process, owning the scratch directory); that also means a command that got
// out of its namespaces would not be root. As any other user, the limit is
// set to the processes the user already has plus the task's allowance.
//
// On macOS it runs under sandbox-exec with SandboxExecProfile: no network,
// reads only of the system's directories, writes only in the scratch
// directory (where the command starts; there is no /work), the same rlimits,
// watches and timeout. There is no PID namespace and no cgroup there: the
// task's processes are its worker's descendants (process_tree.h).
//
// Where no sandbox works (no bwrap, user namespaces disabled, no
// sandbox-exec) Available() says why and Run refuses: a command is never
// run bare.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "sandbox/task_group.h"

namespace claw {

struct SandboxLimits {
  // Wall-clock time it may run (time it spends frozen, paused for the
  // owner, does not count).
  std::chrono::seconds wall_time{600};
  uint64_t cpu_seconds = 600;          // of all its processes together
  // The task's memory with its /tmp and /dev/shm (its TaskGroup, where it
  // binds memory), and each process's address space (RLIMIT_AS).
  uint64_t memory_bytes = 2ULL << 30;
  uint64_t file_bytes = 1ULL << 30;    // RLIMIT_FSIZE: largest file it may write
  uint64_t disk_bytes = 4ULL << 30;    // all it keeps in /work at once
  size_t output_bytes = 64 << 10;      // of stdout and of stderr kept, each
  uint64_t processes = 256;            // at once (a fork bomb stops here)
  double cpu_cores = 1;                // share of the CPU (where a cgroup binds it)
  // An agent running as root runs the sandbox as this uid (its slot's,
  // SandboxUidBlock); 0: one derived from this process's pid.
  uid_t uid = 0;
  // Whether each process's address space is bound too (RLIMIT_AS at
  // memory_bytes). Off only for a program built with AddressSanitizer,
  // whose shadow memory reserves terabytes of address space: its memory is
  // then bound by the cgroup alone, where there is one.
  bool limit_address_space = true;
  // Host files or directories the command may read, each at a path of its
  // own inside (host path, path inside; Linux only): e.g. the claw binary
  // and its ML library, for the sandboxed ML runner (apps/ml_sandbox.h).
  std::vector<std::pair<std::string, std::string>> read_only;
};

// Sandboxes of an agent running as root run as uids from here up.
inline constexpr uid_t kSandboxUidBase = 200'000;
inline constexpr uid_t kSandboxUids = 60'000;
// Each agent has a block of uids, one per slot.
inline constexpr uid_t kSandboxSlotsPerAgent = 64;
// Whatever uid runs it, a command sees itself as this uid and gid (a user
// namespace maps it), so replicas on different agents and slots agree on
// `id -u`.
inline constexpr uid_t kSandboxVisibleUid = 1000;

// The first uid of the block an agent's slots use (slot N: block + N):
// derived from `agent_key` (its state directory), so the same across
// restarts and, with 937 blocks, rarely shared by two agents on one machine.
uid_t SandboxUidBlock(std::string_view agent_key);

struct SandboxResult {
  int exit_code = -1;   // the command's, or 128 + signal
  bool timed_out = false;
  std::string stdout_text;  // at most limits.output_bytes
  std::string stderr_text;
  bool truncated = false;   // stdout or stderr was longer
  // Why the sandbox ended the command early, if it did for a limit other
  // than wall-clock time: "it used more than 10 CPU-seconds", ...
  std::string killed_for;
};

// Ok when commands can be sandboxed here; otherwise why not.
Status SandboxAvailable();

// The macOS sandbox profile (SBPL) for a command confined to `scratch_dir`
// (a real path: macOS's /tmp is /private/tmp). Built on every platform so
// that it is tested everywhere.
std::string SandboxExecProfile(const std::string& scratch_dir);

// The bubblewrap options for a sandbox on `scratch_dir` (what travels in
// the descriptor), for tests to read.
std::vector<std::string> BwrapOptions(const std::string& scratch_dir, const SandboxLimits& limits,
                                      int seccomp_fd, int info_fd);

// Runs argv[0] (looked up in the sandbox's PATH) with `scratch_dir` mounted
// read-write as /work, the working directory, in `group` (null: a process
// tree of this process's descendants). Every process of the command is gone
// when it returns. Errors are about the sandbox itself; the command's
// failure is in the result.
Result<SandboxResult> RunSandboxed(const std::vector<std::string>& argv,
                                   const std::string& scratch_dir, const SandboxLimits& limits,
                                   TaskGroup* group = nullptr);

}  // namespace claw

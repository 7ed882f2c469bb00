// The system-call filter of sandboxed commands (Linux): a BPF program built
// with libseccomp that bubblewrap loads (--seccomp FD) just before it starts
// the command. Everything is allowed except calls a batch command has no use
// for and that attack the host or the sandbox itself; those fail with EPERM
// (clone3 with ENOSYS, so that the C library falls back to clone, whose
// flags can be checked):
//   - inspecting or changing other processes: ptrace, process_vm_readv/
//     writev, kcmp, pidfd_getfd
//   - new namespaces and mounts: unshare, setns, clone with CLONE_NEW*
//     flags, mount, umount2, pivot_root, chroot, fsopen/fsmount/open_tree/
//     move_mount and friends
//   - kernel attack surface: bpf, perf_event_open, userfaultfd, io_uring_*,
//     keyctl, add_key, request_key, kexec_*, *_module, swapon/off, reboot,
//     acct, quotactl, syslog, open_by_handle_at, iopl,
//     ioperm, fanotify_init, lookup_dcookie
//   - terminal injection: ioctl(TIOCSTI) and ioctl(TIOCLINUX)
// System calls of another architecture (x86's 32-bit calls from a 64-bit
// process) kill the process.
#pragma once

#include <string>

#include "common/status.h"

namespace claw {

// The compiled filter (BPF instructions), built once per process.
// Unavailable on macOS and where libseccomp fails.
Result<std::string> SandboxSeccompProgram();

}  // namespace claw

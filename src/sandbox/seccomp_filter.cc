#include "sandbox/seccomp_filter.h"

#ifdef __APPLE__

namespace claw {
Result<std::string> SandboxSeccompProgram() {
  return Unimplemented("seccomp filters are Linux's; macOS sandboxes use sandbox-exec");
}
}  // namespace claw

#else

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace claw {
namespace {

constexpr const char* kDenied[] = {
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot",
    "fsopen", "fsconfig", "fsmount", "fspick", "open_tree", "move_mount", "mount_setattr",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "keyctl", "add_key", "request_key", "kexec_load", "kexec_file_load",
    "init_module", "finit_module", "delete_module", "swapon", "swapoff", "reboot", "acct",
    "quotactl", "quotactl_fd", "syslog", "open_by_handle_at", "name_to_handle_at", "iopl",
    "ioperm", "fanotify_init", "lookup_dcookie", "uselib", "vhangup", "nfsservctl",
    "landlock_create_ruleset",
};

struct Release {
  void operator()(scmp_filter_ctx ctx) const { seccomp_release(ctx); }
};

Result<std::string> Build() {
  std::unique_ptr<void, Release> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return Unavailable("seccomp_init failed");
  auto fail = [](const char* what, int rc) {
    return Unavailable(std::string("seccomp filter: ") + what + ": " + strerror(-rc));
  };
  // A system call of another ABI (i386's int 0x80 on x86_64) ends the
  // whole process, not only its thread (libseccomp's default), where the
  // kernel can (Linux 4.14 and later).
  if (seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) < 0) {
    seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL);
  }
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  for (const char* name : kDenied) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    if (int rc = seccomp_rule_add(ctx.get(), eperm, nr, 0); rc < 0) return fail(name, rc);
  }
  // clone: allowed without namespace flags (fork and threads use it);
  // one rule per flag, since a rule's conditions all have to hold.
  for (uint64_t flag : {CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
                        CLONE_NEWNET, CLONE_NEWCGROUP}) {
    if (int rc = seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(clone), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag));
        rc < 0) {
      return fail("clone", rc);
    }
  }
  // clone3 passes its flags in memory, where a filter cannot look: ENOSYS
  // makes the C library fall back to clone.
  if (int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0); rc < 0) {
    return fail("clone3", rc);
  }
  for (unsigned long request : {static_cast<unsigned long>(TIOCSTI),
                                static_cast<unsigned long>(TIOCLINUX)}) {
    if (int rc = seccomp_rule_add(ctx.get(), eperm, SCMP_SYS(ioctl), 1,
                                  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, request));
        rc < 0) {
      return fail("ioctl", rc);
    }
  }
  int fd = memfd_create("claw-seccomp", MFD_CLOEXEC);
  if (fd < 0) return Unavailable("memfd_create failed");
  std::string program;
  if (int rc = seccomp_export_bpf(ctx.get(), fd); rc < 0) {
    close(fd);
    return fail("export", rc);
  }
  off_t size = lseek(fd, 0, SEEK_END);
  program.resize(static_cast<size_t>(std::max<off_t>(size, 0)));
  ssize_t n = pread(fd, program.data(), program.size(), 0);
  close(fd);
  if (n != static_cast<ssize_t>(program.size())) return Unavailable("seccomp filter: short read");
  return program;
}

}  // namespace

Result<std::string> SandboxSeccompProgram() {
  static const Result<std::string> program = Build();
  return program;
}

}  // namespace claw

#endif  // !__APPLE__

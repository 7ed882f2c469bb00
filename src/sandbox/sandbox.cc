#include "sandbox/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#ifdef __APPLE__
#include <sys/sysctl.h>
#endif
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/clock.h"
#include "common/files.h"
#include "sandbox/process_tree.h"
#include "sandbox/scratch.h"
#include "sandbox/seccomp_filter.h"

#ifndef __APPLE__
#include <sys/mman.h>
#endif

namespace claw {
namespace {

constexpr const char* kBwrap = "/usr/bin/bwrap";
constexpr const char* kSandboxExec = "/usr/bin/sandbox-exec";

#ifdef __APPLE__
constexpr const char* kLauncher = kSandboxExec;
#else
constexpr const char* kLauncher = kBwrap;
#endif

// macOS: sandbox-exec with the profile; the command starts in the scratch
// directory (there is no mount namespace to show it as /work).
[[maybe_unused]] std::vector<std::string> SandboxExecArgs(const std::string& scratch_dir) {
  std::error_code ec;
  std::string real = std::filesystem::canonical(scratch_dir, ec).string();
  return {kSandboxExec, "-p", SandboxExecProfile(ec ? scratch_dir : real), "--"};
}

void SetLimit(int resource, uint64_t value) {
  rlimit rl{value, value};
  setrlimit(resource, &rl);
}

// Processes that `uid` runs now (Linux: from /proc; macOS: sysctl).
uint64_t ProcessesOf(uid_t uid) {
#ifdef __APPLE__
  int mib[4] = {CTL_KERN, KERN_PROC, KERN_PROC_UID, static_cast<int>(uid)};
  size_t bytes = 0;
  if (sysctl(mib, 4, nullptr, &bytes, nullptr, 0) != 0) return 0;
  return bytes / sizeof(struct kinfo_proc);
#endif
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    struct stat st;
    const std::string name = e.path().filename();
    if (!name.empty() && std::isdigit(static_cast<unsigned char>(name[0])) &&
        stat(e.path().c_str(), &st) == 0 && st.st_uid == uid) {
      ++n;
    }
  }
  return n;
}

// Gives the scratch directory and everything in it to `uid`, without
// following links.
Status GiveTo(const std::string& dir, uid_t uid) {
  if (lchown(dir.c_str(), uid, uid) != 0) {
    return Unavailable("cannot give the scratch directory to uid " + std::to_string(uid) + ": " +
                       strerror(errno));
  }
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (lchown(it->path().c_str(), uid, uid) != 0) {
      return Unavailable("cannot give " + it->path().string() + " to the sandbox: " +
                         strerror(errno));
    }
  }
  return Status::Ok();
}

// Closes every descriptor from `first` up (async-signal-safe).
// A descriptor holding `data`, read from its start (Linux: a memfd).
[[maybe_unused]] int DataFd(const std::string& data) {
#ifdef __APPLE__
  (void)data;
  return -1;
#else
  int fd = memfd_create("claw-sandbox", MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      close(fd);
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  lseek(fd, 0, SEEK_SET);
  return fd;
#endif
}

// "child-pid": N from bubblewrap's --info-fd JSON; 0 if not there (yet).
pid_t ChildPidOf(const std::string& info) {
  size_t at = info.find("\"child-pid\"");
  if (at == std::string::npos) return 0;
  at = info.find(':', at);
  if (at == std::string::npos) return 0;
  return static_cast<pid_t>(std::atol(info.c_str() + at + 1));
}

// Each process's descriptors, and the most descriptors and mapping lines
// the disk watch reads per check (over it, the task is stopped: a check
// must stay quick, or it would stretch the task's time).
constexpr uint64_t kTaskDescriptors = 1024;
constexpr size_t kMaxEntriesPerCheck = 200'000;

// Descriptors the launcher gets, in this order from 3 up.
constexpr int kArgsFd = 3, kSeccompFd = 4, kInfoFd = 5;

}  // namespace

std::vector<std::string> BwrapOptions(const std::string& scratch_dir, const SandboxLimits& limits,
                                      int seccomp_fd, int info_fd) {
  // RAM-backed places: sized so that, where no cgroup counts their pages
  // in the task's memory, they still cannot hold more than it.
  const std::string tmp_bytes = std::to_string(std::max<uint64_t>(limits.memory_bytes / 2, 1 << 20));
  const std::string shm_bytes = std::to_string(std::max<uint64_t>(limits.memory_bytes / 4, 1 << 20));
  std::vector<std::string> o = {
      "--unshare-all",   // network (only a loopback), PID, IPC, UTS, user, cgroup
      "--unshare-user",  // required (not only tried): the uid below is mapped in it
      "--disable-userns",  // and no further user namespace inside
      "--uid", std::to_string(kSandboxVisibleUid),
      "--gid", std::to_string(kSandboxVisibleUid),
      "--hostname", "sandbox",
      "--die-with-parent",
      "--new-session",
      "--ro-bind", "/usr", "/usr",
      "--symlink", "usr/bin", "/bin",
      "--symlink", "usr/sbin", "/sbin",
      "--symlink", "usr/lib", "/lib",
      "--symlink", "usr/lib64", "/lib64",
      "--ro-bind-try", "/etc/alternatives", "/etc/alternatives",
      "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"};
  for (const auto& [host, inside] : limits.read_only) o.insert(o.end(), {"--ro-bind", host, inside});
  o.insert(o.end(), {
      "--proc", "/proc",
      "--dev", "/dev",
      "--size", shm_bytes, "--perms", "1777", "--tmpfs", "/dev/shm",
      "--size", tmp_bytes, "--perms", "1777", "--tmpfs", "/tmp",
      "--bind", scratch_dir, "/work",
      "--remount-ro", "/dev",
      "--remount-ro", "/",
      "--chdir", "/work",
      "--clearenv",
      "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
      "--setenv", "HOME", "/work",
      "--setenv", "LANG", "C.UTF-8"});
  if (seccomp_fd >= 0) o.insert(o.end(), {"--seccomp", std::to_string(seccomp_fd)});
  if (info_fd >= 0) o.insert(o.end(), {"--info-fd", std::to_string(info_fd)});
  return o;
}

uid_t SandboxUidBlock(std::string_view agent_key) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (char c : agent_key) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return kSandboxUidBase + static_cast<uid_t>(h % (kSandboxUids / kSandboxSlotsPerAgent)) *
                               kSandboxSlotsPerAgent;
}

std::string SandboxExecProfile(const std::string& scratch_dir) {
  // A string literal in the profile language: quotes and backslashes escaped.
  std::string quoted = "\"";
  for (char c : scratch_dir) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  quoted += "\"";
  return "(version 1)\n"
         "(deny default)\n"
         "(deny network*)\n"
         "(allow process-fork process-exec signal (target same-sandbox))\n"
         "(allow sysctl-read)\n"
         "(allow file-read-metadata)\n"
         "(allow file-read* (subpath \"/usr\") (subpath \"/bin\") (subpath \"/sbin\")\n"
         "  (subpath \"/System\") (subpath \"/Library/Apple\") (subpath \"/opt/homebrew\")\n"
         "  (subpath \"/private/var/db/dyld\") (subpath \"/private/var/db/timezone\")\n"
         "  (literal \"/dev/null\") (literal \"/dev/zero\") (literal \"/dev/urandom\")\n"
         "  (literal \"/dev/random\"))\n"
         "(allow file-write-data (literal \"/dev/null\"))\n"
         "(allow file-read* file-write* (subpath " + quoted + "))\n";
}

Status SandboxAvailable() {
#ifdef __APPLE__
  if (access(kSandboxExec, X_OK) != 0) {
    return FailedPrecondition(std::string(kSandboxExec) + " is not available");
  }
#else
  if (access(kBwrap, X_OK) != 0) {
    return FailedPrecondition("bubblewrap (" + std::string(kBwrap) +
                              ") is not installed: apt-get install bubblewrap");
  }
#endif
  static const Status probe = [] {
    // A fresh directory of its own (mkdtemp), never one someone else made.
    std::string pattern = (std::filesystem::temp_directory_path() / "claw-probe-XXXXXX").string();
    if (!mkdtemp(pattern.data())) return Unavailable("cannot make a probe directory");
    const std::string dir = pattern;
    auto r = RunSandboxed({"true"}, dir, SandboxLimits{std::chrono::seconds(10)});
    RemoveTree(dir);
    if (!r.ok()) return r.status();
    if (r->exit_code != 0) {
      return FailedPrecondition(std::string(kLauncher) +
                                " cannot start a sandbox here (user namespaces off?): " +
                                r->stderr_text);
    }
    return Status::Ok();
  }();
  return probe;
}

Result<SandboxResult> RunSandboxed(const std::vector<std::string>& argv,
                                   const std::string& scratch_dir, const SandboxLimits& limits,
                                   TaskGroup* group) {
  if (argv.empty()) return InvalidArgument("command: empty");
  std::unique_ptr<TaskGroup> own_group;
  if (!group) {
    own_group = OpenTaskGroup("", getpid(), GroupMode::kNone);
    group = own_group.get();
  }
  group->SetLimits(GroupLimits{limits.memory_bytes, limits.processes + 2, limits.cpu_cores});

  // The launcher's command line: its options travel in a descriptor (Linux).
#ifdef __APPLE__
  std::vector<std::string> args = SandboxExecArgs(scratch_dir);
  std::vector<int> data_fds;
  int info_read = -1;
#else
  auto seccomp = SandboxSeccompProgram();
  if (!seccomp.ok()) return seccomp.status();
  std::string packed;
  for (const std::string& o : BwrapOptions(scratch_dir, limits, kSeccompFd, kInfoFd)) {
    packed += o;
    packed += '\0';
  }
  int info[2];
  if (pipe2(info, O_CLOEXEC) != 0) return Unavailable("pipe failed");
  std::vector<int> data_fds = {DataFd(packed), DataFd(*seccomp), info[1]};
  if (data_fds[0] < 0 || data_fds[1] < 0) {
    for (int fd : data_fds) close(fd);
    close(info[0]);
    return Unavailable("cannot pass the sandbox's options (memfd_create failed)");
  }
  int info_read = info[0];
  std::vector<std::string> args = {kBwrap, "--args", std::to_string(kArgsFd), "--"};
#endif
  args.insert(args.end(), argv.begin(), argv.end());
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  // Who the sandbox runs as, and how many processes it may add.
  const bool root = geteuid() == 0;
  const uid_t uid = !root             ? getuid()
                    : limits.uid != 0 ? limits.uid
                                      : kSandboxUidBase + static_cast<uid_t>(getpid()) % kSandboxUids;
  if (Status given = root ? GiveTo(scratch_dir, uid) : Status::Ok(); !given.ok()) {
    for (int fd : data_fds) close(fd);
    if (info_read >= 0) close(info_read);
    return given;
  }
  // bubblewrap's monitor and the namespace's init are two of its processes.
  const uint64_t nproc = ProcessesOf(uid) + limits.processes + 2;
  // The launcher's environment: nothing of the agent's (its parent's
  // environment may hold the contributor's tokens and keys).
#ifdef __APPLE__
  std::string home = "HOME=" + scratch_dir;
  std::vector<char*> env = {const_cast<char*>("PATH=/usr/local/bin:/opt/homebrew/bin:/usr/bin:/bin"),
                            home.data(), const_cast<char*>("LANG=C.UTF-8"), nullptr};
#else
  std::vector<char*> env = {const_cast<char*>("PATH=/usr/bin:/bin"), nullptr};
#endif
  const uint64_t oom_before = group->OomKills();
  const uint64_t cpu_before = group->CpuMicros();

  int out[2] = {-1, -1}, err[2] = {-1, -1};
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    for (int fd : {devnull, out[0], out[1], err[0], err[1], info_read}) {
      if (fd >= 0) close(fd);
    }
    for (int fd : data_fds) close(fd);
    return Unavailable("cannot start a sandbox: out of descriptors");
  }
  // rlimits are inherited across exec: set them in a child of our own
  // (fork, then exec the launcher), not in this process.
  pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {devnull, out[0], out[1], err[0], err[1], info_read}) {
      if (fd >= 0) close(fd);
    }
    for (int fd : data_fds) close(fd);
    return Unavailable("fork failed");
  }
  if (pid == 0) {
    // A failure before the command starts says so on its stderr (not to be
    // taken for the command's own exit status).
    int err_fd = err[1];
    auto setup_failed = [&err_fd](const char* what, int code) {
      static constexpr char kPrefix[] = "claw sandbox: could not start the command: ";
      (void)!write(err_fd, kPrefix, sizeof kPrefix - 1);
      (void)!write(err_fd, what, strlen(what));
      (void)!write(err_fd, "\n", 1);
      _exit(code);
    };
    setpgid(0, 0);
    if (!group->EnterAfterFork()) setup_failed("cannot enter the task's cgroup", 125);
    // Every descriptor it gets goes out of the way first, then to its
    // place (dup2 clears close-on-exec); all others close.
    int moved[3 + 3];
    int sources[6] = {devnull, out[1], err[1], -1, -1, -1};
    for (size_t i = 0; i < data_fds.size(); ++i) sources[3 + i] = data_fds[i];
    // Fails closed: a descriptor that cannot be put in place ends the
    // child (it would otherwise keep the worker's own pipes as 0 and 1).
    const int wanted = 3 + static_cast<int>(data_fds.size());
    for (int i = 0; i < wanted; ++i) {
      moved[i] = sources[i] < 0 ? -1 : fcntl(sources[i], F_DUPFD_CLOEXEC, 100);
      if (moved[i] < 0) setup_failed("cannot place its descriptors", 125);
    }
    err_fd = moved[2];
    for (int i = 0; i < wanted; ++i) {
      if (dup2(moved[i], i) != i) setup_failed("cannot place its descriptors", 125);
    }
    err_fd = 2;
    CloseFrom(3 + static_cast<int>(data_fds.size()));
    // Each process alone: SIGXCPU at the allowance (the group's count
    // usually stops the task first).
    rlimit cpu{limits.cpu_seconds, limits.cpu_seconds + 1};
    setrlimit(RLIMIT_CPU, &cpu);
    if (limits.limit_address_space) SetLimit(RLIMIT_AS, limits.memory_bytes);
    SetLimit(RLIMIT_FSIZE, limits.file_bytes);
    SetLimit(RLIMIT_CORE, 0);
    // Descriptors: enough for any batch command, few enough that the disk
    // watch can look at every one (HeldDeletedBytes).
    SetLimit(RLIMIT_NOFILE, kTaskDescriptors);
    SetLimit(RLIMIT_NPROC, nproc);
    if (root && (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0)) {
      setup_failed("cannot take the sandbox's user id", 126);
    }
    signal(SIGPIPE, SIG_DFL);
#ifdef __APPLE__
    // No mount namespace: the command starts in its scratch directory.
    if (chdir(scratch_dir.c_str()) != 0) setup_failed("cannot enter its scratch directory", 126);
#endif
    execve(kLauncher, cargv.data(), env.data());
    setup_failed(kLauncher, 127);  // (its name, as the reason: it could not be run)
  }
  setpgid(pid, pid);
  close(out[1]);
  close(err[1]);
  close(devnull);
  for (int fd : data_fds) close(fd);  // the info pipe's write end among them

  // Files removed while still open count too: by their filesystem.
  struct stat scratch_st{};
  dev_t scratch_dev = stat(scratch_dir.c_str(), &scratch_st) == 0 ? scratch_st.st_dev : 0;
  SandboxResult result;
  Stopwatch watch;
  int64_t elapsed_ms = 0, last_ms = 0;
  pollfd fds[3] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {info_read, POLLIN, 0}};
  std::string* sinks[2] = {&result.stdout_text, &result.stderr_text};
  std::string info_text;
  int open_fds = 2;
  char buf[16384];
  int64_t next_check_ms = 0;
  bool exited = false;
  int status = 0;
  auto kill_all = [&] {
    pid_t init = ChildPidOf(info_text);
    if (init > 0) kill(init, SIGKILL);  // its PID namespace
    kill(-pid, SIGKILL);
    group->KillAll();
    // The namespace's processes, reparented out of the worker's tree as its
    // init dies, are all gone once the init has exited (the kernel waits
    // for them first): without a cgroup, that is how to know.
    for (Stopwatch w; init > 0 && Alive(init) && w.Micros() < 5'000'000;) usleep(2000);
  };
  while (open_fds > 0) {
    // Time the task ran: a gap longer than a second between two turns of
    // this loop (which waits at most 250 ms) is this worker and its task
    // frozen while the owner was back, and does not count.
    int64_t now_ms = watch.Micros() / 1000;
    elapsed_ms += std::min<int64_t>(now_ms - last_ms, 1000);
    last_ms = now_ms;
    int64_t left_ms = limits.wall_time.count() * 1000 - elapsed_ms;
    if (left_ms <= 0) {
      result.timed_out = true;
      break;
    }
    if (elapsed_ms >= next_check_ms) {
      next_check_ms = elapsed_ms + 250;
      uint64_t cpu_now = group->CpuMicros();
      uint64_t cpu = cpu_now > cpu_before ? cpu_now - cpu_before : 0;
      if (cpu > limits.cpu_seconds * 1'000'000) {
        result.killed_for = "it used more than " + std::to_string(limits.cpu_seconds) +
                            " CPU-seconds (all its processes together)";
        break;
      }
      bool unreadable = false;
      uint64_t held = 0;
      if (limits.disk_bytes > 0 &&
          !HeldDeletedBytes(group->Processes(), scratch_dev, kMaxEntriesPerCheck, &held)) {
        result.killed_for = "it kept more open files and mappings than the disk watch counts (" +
                            std::to_string(kMaxEntriesPerCheck) + ")";
        break;
      }
      if (limits.disk_bytes > 0 &&
          DiskUsage(scratch_dir, limits.disk_bytes, &unreadable) + held > limits.disk_bytes) {
        result.killed_for = "it kept more than " + std::to_string(limits.disk_bytes >> 20) +
                            " MiB in its scratch directory (disk_mb; files removed but still "
                            "open count too)";
        break;
      }
      if (unreadable) {
        result.killed_for = "it made a directory in its scratch directory that cannot be read, "
                            "so the disk it uses cannot be measured";
        break;
      }
      // The launcher gone while something it left still holds the pipes.
      if (!exited && waitpid(pid, &status, WNOHANG) == pid) exited = true;
      if (exited && elapsed_ms > 0) {
        // Drain what is already there, then stop listening.
        for (int i = 0; i < 2; ++i) {
          while (fds[i].fd >= 0) {
            pollfd one = {fds[i].fd, POLLIN, 0};
            if (poll(&one, 1, 0) <= 0) break;
            ssize_t n = read(fds[i].fd, buf, sizeof buf);
            if (n <= 0) break;
            size_t room = limits.output_bytes - std::min(limits.output_bytes, sinks[i]->size());
            sinks[i]->append(buf, std::min<size_t>(room, static_cast<size_t>(n)));
            if (static_cast<size_t>(n) > room) result.truncated = true;
          }
        }
        break;
      }
    }
    int wait_ms = static_cast<int>(std::min<int64_t>({left_ms, 250, next_check_ms - elapsed_ms + 1}));
    for (auto& f : fds) f.revents = 0;
    if (poll(fds, fds[2].fd >= 0 ? 3 : 2, std::max(wait_ms, 1)) < 0 && errno != EINTR) {
      result.killed_for = std::string("the sandbox could not watch it (poll: ") + strerror(errno) + ")";
      break;
    }
    if (fds[2].fd >= 0 && (fds[2].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t n = read(fds[2].fd, buf, sizeof buf);
      if (n > 0) info_text.append(buf, static_cast<size_t>(n));
      else {
        close(fds[2].fd);
        fds[2].fd = -1;
      }
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      size_t room = limits.output_bytes - std::min(limits.output_bytes, sinks[i]->size());
      sinks[i]->append(buf, std::min<size_t>(room, static_cast<size_t>(n)));
      if (static_cast<size_t>(n) > room) result.truncated = true;
    }
  }
  const bool stopped_early = result.timed_out || !result.killed_for.empty();
  if (stopped_early) kill_all();
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  if (!exited && waitpid(pid, &status, 0) != pid) status = 0x7f00;  // "exit 127": not a success
  // Whatever it left behind (a daemon that escaped its session) goes too.
  group->KillAll();
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const bool signalled = WIFSIGNALED(status) || result.exit_code > 128;
  if (result.killed_for.empty() && !result.timed_out && signalled &&
      group->CpuMicros() + 500'000 >= cpu_before + limits.cpu_seconds * 1'000'000) {
    result.killed_for = "it used more than " + std::to_string(limits.cpu_seconds) +
                        " CPU-seconds";
  }
  if (result.killed_for.empty() && !result.timed_out && group->OomKills() > oom_before) {
    result.killed_for = "it ran out of memory: the task may use " +
                        std::to_string(limits.memory_bytes >> 20) +
                        " MiB with its /tmp and /dev/shm (memory_mb)";
  }
  return result;
}

}  // namespace claw

#include "apps/sandbox.h"

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
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <filesystem>

#include "common/clock.h"

extern char** environ;

namespace claw {
namespace {

constexpr const char* kBwrap = "/usr/bin/bwrap";
constexpr const char* kSandboxExec = "/usr/bin/sandbox-exec";

#ifdef __APPLE__
constexpr const char* kLauncher = kSandboxExec;
#else
constexpr const char* kLauncher = kBwrap;
#endif

[[maybe_unused]] std::vector<std::string> BwrapArgs(const std::string& scratch_dir) {
  return {kBwrap,
          "--unshare-all",  // network (only a loopback), PID, IPC, UTS, user, cgroup
          "--unshare-user",  // required (not only tried): the uid below is mapped in it
          "--uid", std::to_string(kSandboxVisibleUid),
          "--gid", std::to_string(kSandboxVisibleUid),
          "--die-with-parent",
          "--new-session",
          "--ro-bind", "/usr", "/usr",
          "--symlink", "usr/bin", "/bin",
          "--symlink", "usr/sbin", "/sbin",
          "--symlink", "usr/lib", "/lib",
          "--symlink", "usr/lib64", "/lib64",
          "--ro-bind-try", "/etc/alternatives", "/etc/alternatives",
          "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
          "--proc", "/proc",
          "--dev", "/dev",
          "--tmpfs", "/tmp",
          "--bind", scratch_dir, "/work",
          "--chdir", "/work",
          "--clearenv",
          "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
          "--setenv", "HOME", "/work",
          "--setenv", "LANG", "C.UTF-8",
          "--"};
}

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

}  // namespace

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
    std::string dir = std::filesystem::temp_directory_path() / ("claw-probe-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    auto r = RunSandboxed({"true"}, dir, SandboxLimits{std::chrono::seconds(10)});
    std::filesystem::remove_all(dir);
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
                                   const std::string& scratch_dir, const SandboxLimits& limits) {
  if (argv.empty()) return InvalidArgument("command: empty");
#ifdef __APPLE__
  std::vector<std::string> args = SandboxExecArgs(scratch_dir);
#else
  std::vector<std::string> args = BwrapArgs(scratch_dir);
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
  if (root) CLAW_RETURN_IF_ERROR(GiveTo(scratch_dir, uid));
  const uint64_t nproc = ProcessesOf(uid) + limits.processes;

  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return Unavailable("pipe failed");
  // rlimits are inherited across exec: set them in a child of our own
  // (fork, then exec bwrap), not in this process.
  pid_t pid = fork();
  if (pid < 0) return Unavailable("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    SetLimit(RLIMIT_CPU, limits.cpu_seconds);
    SetLimit(RLIMIT_AS, limits.memory_bytes);
    SetLimit(RLIMIT_FSIZE, limits.file_bytes);
    SetLimit(RLIMIT_CORE, 0);
    SetLimit(RLIMIT_NPROC, nproc);
    if (root && (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0)) _exit(126);
    signal(SIGPIPE, SIG_DFL);
#ifdef __APPLE__
    // No mount namespace: the command starts in its scratch directory, with
    // an environment of our choosing rather than the agent's.
    if (chdir(scratch_dir.c_str()) != 0) _exit(126);
    std::string home = "HOME=" + scratch_dir;
    char* env[] = {const_cast<char*>("PATH=/usr/local/bin:/opt/homebrew/bin:/usr/bin:/bin"),
                   home.data(), const_cast<char*>("LANG=C.UTF-8"), nullptr};
    execve(kLauncher, cargv.data(), env);
#else
    execve(kLauncher, cargv.data(), environ);
#endif
    _exit(127);
  }
  setpgid(pid, pid);
  close(out[1]);
  close(err[1]);

  SandboxResult result;
  Stopwatch watch;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.stdout_text, &result.stderr_text};
  int open_fds = 2;
  char buf[16384];
  while (open_fds > 0) {
    int64_t left_ms = limits.wall_time.count() * 1000 - watch.Micros() / 1000;
    if (left_ms <= 0) {
      result.timed_out = true;
      break;
    }
    if (poll(fds, 2, static_cast<int>(std::min<int64_t>(left_ms, 1000))) < 0 && errno != EINTR) {
      break;
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
  if (result.timed_out) kill(-pid, SIGKILL);  // the whole tree
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace claw

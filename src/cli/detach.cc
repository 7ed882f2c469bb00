#include "cli/detach.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/files.h"

namespace claw {

namespace {

// The last `n` lines of the file at `path`, for a failure that names a log.
std::string Tail(const std::string& path, size_t n) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) {
    lines.push_back(line);
    if (lines.size() > n) lines.erase(lines.begin());
  }
  std::string out;
  for (const auto& l : lines) out += "  " + l + "\n";
  return out;
}

[[noreturn]] void WaitForChild(int fd, pid_t child, const std::string& log_path,
                               std::chrono::seconds patience) {
  std::string report;
  auto end = std::chrono::steady_clock::now() + patience;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      std::fprintf(stderr,
                   "error: not ready after %lld s; it goes on in the background (pid %d, log "
                   "%s)\n",
                   static_cast<long long>(patience.count()), child, log_path.c_str());
      std::exit(3);
    }
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    ssize_t got = read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // the child closed its end: the report is whole
    report.append(buf, static_cast<size_t>(got));
  }
  size_t nl = report.find('\n');
  if (nl == std::string::npos) {
    int status = 0;
    waitpid(child, &status, WNOHANG);
    std::fprintf(stderr, "error: it exited before it was ready; the end of its log (%s):\n%s",
                 log_path.c_str(), Tail(log_path, 15).c_str());
    std::exit(1);
  }
  int code = std::atoi(report.substr(0, nl).c_str());
  std::string message = report.substr(nl + 1);
  if (code == 0) {
    std::printf("%s\n", message.c_str());
    std::fflush(stdout);
    std::exit(0);
  }
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::exit(code);
}

}  // namespace

DetachedChild::~DetachedChild() {
  if (fd_ >= 0) close(fd_);
}

DetachedChild& DetachedChild::operator=(DetachedChild&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void DetachedChild::Send(int exit_code, const std::string& message) {
  if (fd_ < 0) return;
  std::string report = std::to_string(exit_code) + "\n" + message;
  const char* p = report.data();
  size_t left = report.size();
  while (left > 0) {
    ssize_t n = write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the parent is gone: nobody to tell
    p += n;
    left -= static_cast<size_t>(n);
  }
  close(fd_);
  fd_ = -1;
}

void DetachedChild::Ready(const std::string& message) { Send(0, message); }

void DetachedChild::Failed(int exit_code, const std::string& message) {
  Send(exit_code == 0 ? 1 : exit_code, message);
}

Result<DetachedChild> Detach(const std::string& log_path, std::chrono::seconds patience) {
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) return Unavailable("cannot open the log " + log_path + ": " + std::strerror(errno));
  int fds[2];
  if (pipe(fds) != 0) {  // (no pipe2 on macOS)
    close(log);
    return Unavailable(std::string("pipe: ") + std::strerror(errno));
  }
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);  // workers the child starts must not hold it open
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    close(log);
    close(fds[0]);
    close(fds[1]);
    return Unavailable(std::string("fork: ") + std::strerror(errno));
  }
  if (pid > 0) {
    close(log);
    close(fds[1]);
    WaitForChild(fds[0], pid, log_path, patience);
  }
  close(fds[0]);
  setsid();  // no terminal: Ctrl-C in the shell that started it does not reach it
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null >= 0) {
    dup2(null, 0);
    close(null);
  }
  dup2(log, 1);
  dup2(log, 2);
  close(log);
  // Nothing the shell that started it held open (`7<secret`) stays open in a
  // daemon, its workers or their tasks: the report pipe alone, as fd 3.
  int report = fds[1];
  if (report != 3) {
    dup2(report, 3);
    close(report);
    report = 3;
  }
  fcntl(report, F_SETFD, FD_CLOEXEC);
  CloseFrom(4);
  return DetachedChild(report);
}

Status StopService(const std::string& info_path, const std::string& what,
                   std::chrono::seconds patience) {
  std::ifstream f(info_path);
  if (!f) return NotFound("no " + what + " is running here (no " + info_path + ")");
  auto info = nlohmann::json::parse(f, nullptr, false);
  if (!info.is_object() || !info.contains("pid") || !info["pid"].is_number_integer() ||
      info["pid"].get<int64_t>() <= 1) {
    return InvalidArgument(info_path + ": no pid in it");
  }
  pid_t pid = static_cast<pid_t>(info["pid"].get<int64_t>());
  if (kill(pid, SIGTERM) != 0) {
    if (errno == ESRCH) {
      std::remove(info_path.c_str());  // left by a process that died without cleaning up
      return NotFound(what + " (pid " + std::to_string(pid) + ") was not running; removed " +
                      info_path);
    }
    return PermissionDenied("cannot signal " + what + " (pid " + std::to_string(pid) +
                            "): " + std::strerror(errno));
  }
  auto gone = [pid] {
    if (kill(pid, 0) != 0) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string s;
    std::getline(stat, s);
    size_t close = s.rfind(')');
    return close != std::string::npos && close + 2 < s.size() && s[close + 2] == 'Z';
  };
  auto end = std::chrono::steady_clock::now() + patience;
  while (!gone()) {
    if (std::chrono::steady_clock::now() > end) {
      return Unavailable(what + " (pid " + std::to_string(pid) + ") has not stopped after " +
                         std::to_string(patience.count()) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::Ok();
}

}  // namespace claw

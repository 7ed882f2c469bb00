// The agent's control socket: the listening thread (Agent::ControlLoop) and
// the client side (SendAgentControl).
#include "agent/agent_control.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "agent/agent.h"

namespace claw {
namespace {

constexpr size_t kMaxRequest = 64;

Result<sockaddr_un> SocketAddress(const std::string& state_dir) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string path = state_dir + "/" + kAgentControlSocket;
  if (path.size() >= sizeof addr.sun_path) {
    return InvalidArgument("the state directory's path is too long for a socket: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// The uid of the process at the other end of `fd`.
bool PeerUid(int fd, uid_t* uid) {
#if defined(__APPLE__)
  gid_t gid;
  return getpeereid(fd, uid, &gid) == 0;
#else
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  *uid = cred.uid;
  return true;
#endif
}

// Reads one line (up to `max` bytes) within `ms`.
std::string ReadLine(int fd, int ms, size_t max) {
  std::string line;
  char buf[512];
  while (line.size() < max) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) break;
    ssize_t n = read(fd, buf, std::min(sizeof buf, max - line.size()));
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
    if (line.find('\n') != std::string::npos) break;
  }
  return line.substr(0, line.find('\n'));
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

Status Agent::StartControl() {
  auto addr = SocketAddress(options_.state_dir);
  if (!addr.ok()) return addr.status();
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(std::string("control socket: ") + strerror(errno));
  unlink(addr->sun_path);  // one left by an agent that was killed
  // Made 0600 from the start: no moment when another user could connect.
  const mode_t old_mask = umask(0177);
  const int bound = bind(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr);
  umask(old_mask);
  if (bound != 0 || listen(fd, 8) != 0) {
    const std::string why = strerror(errno);
    close(fd);
    return Unavailable("control socket " + std::string(addr->sun_path) + ": " + why);
  }
  control_fd_ = fd;
  control_thread_ = std::thread([this] { ControlLoop(); });
  return Status::Ok();
}

void Agent::StopControl() {
  if (control_fd_ < 0) return;
  control_stop_ = true;  // the loop looks at it at least every 200 ms
  shutdown(control_fd_, SHUT_RDWR);
  if (control_thread_.joinable()) control_thread_.join();
  close(control_fd_);
  control_fd_ = -1;
  if (auto addr = SocketAddress(options_.state_dir); addr.ok()) unlink(addr->sun_path);
}

void Agent::ControlLoop() {
  while (!stop_ && !control_stop_) {
    pollfd p{control_fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return;
    int c = accept4(control_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    uid_t uid = 0;
    nlohmann::json answer;
    if (!PeerUid(c, &uid) || (uid != geteuid() && uid != 0)) {
      answer = {{"error", "not this agent's user: uid " + std::to_string(uid)}};
      log_->warn("control request refused from uid={}", uid);
    } else {
      const std::string cmd = ReadLine(c, 1000, kMaxRequest);
      if (cmd == "pause") {
        control_ = static_cast<int>(OwnerControl::kPaused);
      } else if (cmd == "finish") {
        control_ = static_cast<int>(OwnerControl::kFinishing);
      } else if (cmd == "resume") {
        control_ = static_cast<int>(OwnerControl::kNone);
      }
      if (cmd == "pause" || cmd == "finish" || cmd == "resume" || cmd == "status") {
        if (cmd != "status") log_->info("owner asked the agent to {}", cmd);
        MutexLock lock(status_mu_);
        answer = nlohmann::json::parse(status_json_, nullptr, false);
        if (!answer.is_object()) answer = nlohmann::json::object();
        answer["requested"] = OwnerControlName(static_cast<OwnerControl>(control_.load()));
      } else {
        answer = {{"error", "unknown command '" + cmd.substr(0, 32) +
                                "' (pause, finish, resume, status)"}};
      }
    }
    WriteAll(c, answer.dump() + "\n");
    close(c);
  }
}

void Agent::ApplyOwnerControl() {
  const auto want = static_cast<OwnerControl>(control_.load());
  if (want != policy_.control()) {
    // Finishing asks for nothing more: what the coordinator would still send
    // for our outstanding demand is withdrawn.
    if (want == OwnerControl::kFinishing) withdraw_ = true;
    policy_.SetControl(want);
  }
  // Finishing: once nothing is held, running or on its way, pause.
  if (want == OwnerControl::kFinishing && pool_->held() == 0 && staging_.empty() &&
      requested_ == 0 && uploading_.empty()) {
    int expected = static_cast<int>(OwnerControl::kFinishing);
    control_.compare_exchange_strong(expected, static_cast<int>(OwnerControl::kPaused));
    policy_.SetControl(OwnerControl::kPaused);
    log_->info("finished what it held; paused");
  }
}

void Agent::UpdateStatus() {
  nlohmann::json s = {{"agent", identity_.agent_id},
                      {"state", AvailabilityName(policy_.state())},
                      {"control", OwnerControlName(policy_.control())},
                      {"tasks_held", pool_ ? pool_->held() : 0},
                      {"slots", slots_}};
  const std::string& why = policy_.reason();
  if (policy_.control() == OwnerControl::kFinishing) {
    s["why"] = "finishing the tasks it holds, then pausing (claw agent resume to go on)";
  } else if (!why.empty()) {
    s["why"] = why;
  } else if (s["tasks_held"] == 0) {
    s["why"] = "available, waiting for work";
  }
  MutexLock lock(status_mu_);
  status_json_ = s.dump();
}

Result<std::string> SendAgentControl(const std::string& state_dir, const std::string& command) {
  auto addr = SocketAddress(state_dir);
  if (!addr.ok()) return addr.status();
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Unavailable(std::string("socket: ") + strerror(errno));
  if (connect(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof *addr) != 0) {
    const int err = errno;
    close(fd);
    if (err == EACCES || err == EPERM) {
      return PermissionDenied("the agent on " + state_dir + " is not yours to control");
    }
    return Unavailable("no agent runs on " + state_dir + " (" + strerror(err) + ")");
  }
  WriteAll(fd, command + "\n");
  std::string answer = ReadLine(fd, 5000, 1 << 16);
  close(fd);
  if (answer.empty()) return Unavailable("the agent on " + state_dir + " did not answer");
  auto j = nlohmann::json::parse(answer, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    return PermissionDenied(j["error"].get<std::string>());
  }
  return answer;
}

}  // namespace claw

// Helpers for integration tests: real `claw` processes on 127.0.0.1, each
// with its output in a log file under the test's own temporary directory.
#pragma once

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/registry.h"
#include "cli/client.h"
#include "core/job_spec.h"

extern char** environ;

namespace claw::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A free TCP port on 127.0.0.1 (bound then released; fine on loopback).
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// The result a job must have: the same spec computed in this process.
inline std::string ReferenceResult(const std::string& spec_json) {
  AppRegistry apps = BuiltinApps();
  auto planned = ParseAndPlanJob(spec_json, apps);
  EXPECT_TRUE(planned.ok());
  const App* app = apps.Find(planned->spec.app);
  std::vector<std::string> outs;
  for (const auto& t : planned->tasks) outs.push_back(*app->Run(t.params, {}));
  std::vector<std::string_view> views(outs.begin(), outs.end());
  return app->Merge(planned->spec, views)->dump();
}

inline bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds limit,
                    std::chrono::milliseconds every = std::chrono::milliseconds(20)) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(every);
  }
  return cond();
}

// One child process running `claw ARGS...` (or `program ARGS...`), output
// to `log`.
class Process {
 public:
  Process(std::vector<std::string> args, std::string log, std::string program = CLAW_BINARY)
      : log_(std::move(log)) {
    args.insert(args.begin(), program);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // one group: kill takes workers too
    posix_spawnattr_setpgroup(&attr, 0);
    if (posix_spawn(&pid_, program.c_str(), &fa, &attr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
  }
  ~Process() { Kill(SIGKILL); }
  // Asks the process alone to stop (SIGTERM) and waits up to `limit`; then
  // kills its group. Agents stopped so clean up after themselves (their
  // tasks' scratch directories and cgroups).
  void Stop(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    if (!Exited(limit)) Kill(SIGKILL);
  }
  Process(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Sends `sig` to the process group (the process and its workers) and reaps.
  int Kill(int sig) {
    if (pid_ <= 0) return exit_code_;
    kill(-pid_, sig);
    return Wait();
  }
  // Waits for exit; returns the exit code (128+signal if killed).
  int Wait() {
    if (pid_ <= 0) return exit_code_;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_code_;
  }
  bool Exited(std::chrono::milliseconds limit) {
    return WaitFor([&] {
      if (pid_ <= 0) return true;
      int status;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pid_ = -1;
        return true;
      }
      return false;
    }, limit);
  }
  std::string Output() const { return ReadFile(log_); }
  // The last `lines` lines of its log: what a failure shows.
  std::string Tail(size_t lines = 40) const {
    std::string text = Output();
    size_t at = text.size();
    for (size_t n = 0; n <= lines; ++n) {
      if (at == 0 || (at = text.rfind('\n', at - 1)) == std::string::npos) return text;
    }
    return text.substr(at + 1);
  }
  int exit_code() const { return exit_code_; }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
};

// The pids of an agent's worker processes: its children running
// `claw __worker` (not, say, the sandbox probe it runs at start).
inline std::vector<pid_t> WorkersOf(pid_t parent) {
  std::vector<pid_t> kids;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = ReadFile(e.path() / "stat");
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && ReadFile(e.path() / "cmdline").find("__worker") != std::string::npos) {
      kids.push_back(std::stoi(name));
    }
  }
  return kids;
}

// Availability sensors for an agent started with --sensors-file: the user
// idle for `user_idle_s` seconds, nothing else busy, on mains power.
inline void WriteSensors(const std::filesystem::path& path, double user_idle_s) {
  std::ofstream(path.string() + ".tmp") << R"({"other_cpu":0,"user_idle_s":)" << user_idle_s
                                         << R"(,"on_ac":true})";
  std::filesystem::rename(path.string() + ".tmp", path);
}

// A scratch directory per test, and a coordinator plus agents on it.
class Network : public ::testing::Test {
 protected:
  void SetUp() override {
    // A server may close a connection this process still writes to (a
    // refused body, a reset): an error to see, not a signal that ends the test.
    signal(SIGPIPE, SIG_IGN);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("claw-it-" + std::string(info->test_suite_name()) + "-" + info->name() + "-" +
            std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    port_ = FreePort();
    http_port_ = FreePort();
  }
  void TearDown() override {
    for (auto& a : agents_) a->Stop();
    agents_.clear();
    coordinator_.reset();
    if (!HasFailure() && !getenv("CLAW_KEEP_TEST_DIRS")) std::filesystem::remove_all(dir_);
  }

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string data() const { return (dir_ / "data").string(); }
  std::string ca_file() const { return data() + "/ca.pem"; }

  // With --insecure-local unless `secure` (then clients need API tokens).
  void StartCoordinator(std::vector<std::string> extra = {}, bool secure = false) {
    std::vector<std::string> args = {"coordinator", "--data", data(), "--port",
                                      std::to_string(port_), "--http-port",
                                      std::to_string(http_port_), "--enroll-tokens", "8"};
    if (!secure) args.push_back("--insecure-local");
    secure_ = secure;
    args.insert(args.end(), extra.begin(), extra.end());
    coordinator_ = std::make_unique<Process>(args, (dir_ / "coordinator.log").string());
    ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(data() + "/coordinator.json"); },
                        std::chrono::seconds(20)))
        << coordinator_->Output();
  }

  // Starts an agent with the next unused enrollment token; a dedicated one
  // (--always) unless `always` is false.
  // `token`: enroll with this one instead.
  Process& StartAgent(int slots = 1, std::vector<std::string> extra = {}, bool always = true,
                      std::string token = "") {
    if (token.empty()) {  // the next unused one from the coordinator's file
      std::istringstream tokens(ReadFile(data() + "/enroll-tokens"));
      for (size_t i = 0; i <= file_tokens_used_; ++i) std::getline(tokens, token);
      file_tokens_used_++;
    }
    std::string n = std::to_string(agents_.size());
    std::vector<std::string> args = {"agent", "--coordinator", target(), "--state",
                                      (dir_ / ("agent" + n)).string(), "--token", token,
                                      "--slots", std::to_string(slots)};
    if (always) args.push_back("--always");
    if (secure_) args.insert(args.end(), {"--ca", ca_file()});
    args.insert(args.end(), extra.begin(), extra.end());
    agents_.push_back(
        std::make_unique<Process>(args, (dir_ / ("agent" + n + ".log")).string()));
    return *agents_.back();
  }

  // Runs `claw -c TARGET [--ca CA] ARGS...` to its end; returns its exit
  // code, with its output (stdout and stderr) in `out`.
  int Claw(std::vector<std::string> args, std::string* out = nullptr) {
    std::string log = (dir_ / ("cli-" + std::to_string(++claw_runs_) + ".log")).string();
    args.insert(args.begin(), {"-c", target()});
    if (secure_) args.insert(args.begin() + 2, {"--ca", ca_file()});
    Process p(args, log);
    int code = p.Wait();
    if (out) *out = p.Output();
    return code;
  }

  v1::JobInfo WaitForJobEnd(Client& client, const std::string& id,
                            std::chrono::seconds limit = std::chrono::seconds(120)) {
    v1::JobInfo last;
    WaitFor([&] {
      auto j = client.GetJob(id);
      if (j.ok()) last = *j;
      return j.ok() && j->state() != "running";
    }, limit);
    return last;
  }

  std::filesystem::path dir_;
  int port_ = 0;
  int http_port_ = 0;
  bool secure_ = false;  // TLS and API tokens (not --insecure-local)
  size_t file_tokens_used_ = 0;
  int claw_runs_ = 0;
  std::unique_ptr<Process> coordinator_;
  std::vector<std::unique_ptr<Process>> agents_;
};

}  // namespace claw::testing

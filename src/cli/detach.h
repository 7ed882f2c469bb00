// Long-lived commands in the background (`claw coordinator --detach`,
// `claw agent --detach`), the way `pg_ctl start -w` or `ray start` work: the
// command returns once the service is up, or fails with the service's own
// error, so a script (or the README's tour) can go straight on to the next
// command. `claw coordinator stop` / `claw agent stop` end them again.
//
// Detach() forks before anything starts a thread (gRPC must not be running
// across a fork). The child starts a session of its own, appends its output
// to a log file and carries on; the parent waits until the child reports
// through a pipe and exits with the child's verdict. A child that dies
// before reporting makes the parent fail, naming the log.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace claw {

class DetachedChild {
 public:
  explicit DetachedChild(int fd = -1) : fd_(fd) {}
  DetachedChild(DetachedChild&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  DetachedChild& operator=(DetachedChild&& o) noexcept;
  ~DetachedChild();

  // Whether this process is a detached child (false when not detaching).
  bool detached() const { return fd_ >= 0; }
  // Tells the waiting parent the service is up; it prints `message` and
  // exits 0. Later calls do nothing.
  void Ready(const std::string& message);
  // Tells the parent the service could not start; it prints `message` as an
  // error and exits with `exit_code`. Later calls do nothing.
  void Failed(int exit_code, const std::string& message);

 private:
  void Send(int exit_code, const std::string& message);
  int fd_;
};

// In the parent: waits up to `patience` for the child's report, then exits
// the process (never returns). In the child: returns the handle to report
// with. An error (fork or the log file) is returned before any fork.
Result<DetachedChild> Detach(const std::string& log_path, std::chrono::seconds patience);

// Sends SIGTERM to the service whose pid is in the JSON file `info_path`
// ({"pid": N}, as coordinator.json and agent.json are), and waits up to
// `patience` for it to end. NotFound when the file is absent (not running).
Status StopService(const std::string& info_path, const std::string& what,
                   std::chrono::seconds patience);

}  // namespace claw

// WorkerPool: long-lived worker processes, one per slot, running built-in
// app tasks in isolation from the agent.
//
// Tasks are queued with Submit and handed to idle workers in small batches
// (sized so that every worker gets a share); each result is delivered through
// the callback as soon as the worker finishes it. A worker that dies (crash,
// limit exceeded, killed) loses only the task it was running, which is
// reported failed with the cause; the rest of its batch goes back to the
// queue and a new worker is started.
//
// Thread-safe. The callback runs on the pool's threads and must not call
// back into the pool.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "agent/worker_main.h"
#include "claw.pb.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/status.h"
#include "sandbox/task_group.h"

namespace claw {

struct WorkerPoolOptions {
  size_t workers = 1;
  std::string executable;  // the `claw` binary; started as `claw __worker ...`
  WorkerLimits limits;
  size_t max_batch = 64;   // most tasks handed to one worker at once
  std::string blob_dir;    // the agent's blob cache, for apps with files; empty: none
  // Slot N's sandboxes run as sandbox_uid_block + N (root agents; 0: none).
  uint32_t sandbox_uid_block = 0;
  // Slot N's sandboxed commands run in the TaskGroup "<group_prefix>/slot-N"
  // (empty: none; the sandbox then finds them as the worker's descendants)
  // made the way `group_mode` says ("auto", "v2", "v1", "none"), and keep
  // their scratch directories in <scratch_root>/slot-N (empty: the system's
  // temporary directory).
  std::string group_prefix;
  std::string group_mode = "auto";
  std::string scratch_root;
  std::vector<std::string> datasets;  // local datasets, NAME=DIR (WorkerSetup)
  std::string misbehave;              // RunContext::misbehave (benchmarks, tests)
};

struct TaskOutcome {
  uint64_t lease_id = 0;
  bool ok = false;
  std::string output;
  std::string error;
  uint64_t runtime_us = 0;
};

class WorkerPool {
 public:
  using Callback = std::function<void(TaskOutcome)>;
  WorkerPool(WorkerPoolOptions options, Callback on_done, Logger log);
  ~WorkerPool();  // stops and reaps every worker

  // Starts the workers. Unavailable if one cannot be started.
  Status Start();
  void Submit(std::vector<v1::WorkerTask> tasks);
  // Drops a queued task, or kills the worker running it; no outcome is
  // delivered for it. False if the pool does not hold the lease.
  bool Cancel(uint64_t lease_id);
  // Freezes every worker (SIGSTOP) and the sandboxed commands it runs (their
  // TaskGroup, or each descendant), or thaws them.
  void Pause();
  void Resume();
  // Takes back every queued and running task (running ones are killed) and
  // returns their leases; no outcome is delivered for them.
  std::vector<uint64_t> TakeBackAll();

  // Leases the pool holds (queued or running).
  std::vector<uint64_t> HeldLeases() const;
  // Of those, the leases a worker runs now.
  std::vector<uint64_t> RunningLeases() const;
  size_t held() const;
  std::vector<pid_t> WorkerPids() const;
  // The workers and every process they started (sandboxes included).
  std::vector<pid_t> OwnPids() const;
  // How sandboxed commands are held here (TaskGroup::Describe of slot 0's);
  // empty without groups.
  std::string GroupDescription() const;
  // Whether sandboxed commands' memory is bounded per task (a cgroup).
  bool GroupsBindMemory() const;
  size_t workers() const { return options_.workers; }

 private:
  struct Worker;
  void Loop(Worker* w);
  bool Spawn(Worker* w);
  void Reap(Worker* w, std::string* cause);
  // Stops (SIGSTOP) or continues the worker and what it started.
  void Freeze(Worker* w, bool frozen) CLAW_REQUIRES(mu_);

  WorkerPoolOptions options_;
  Callback on_done_;
  Logger log_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<v1::WorkerTask> queue_ CLAW_GUARDED_BY(mu_);
  std::unordered_set<uint64_t> held_ CLAW_GUARDED_BY(mu_);       // queued or running
  std::unordered_set<uint64_t> abandoned_ CLAW_GUARDED_BY(mu_);  // cancelled while running
  bool stopping_ CLAW_GUARDED_BY(mu_) = false;
  bool paused_ CLAW_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Worker>> workers_;
};

// The path of the running executable (for starting workers).
std::string SelfExecutable();

}  // namespace claw

#include "agent/worker_pool.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "agent/framing.h"
#include "sandbox/process_tree.h"
#include "sandbox/sandbox.h"

#ifdef __APPLE__
#include <mach-o/dyld.h>
#endif

extern char** environ;

namespace claw {

struct WorkerPool::Worker {
  size_t slot = 0;
  pid_t pid = -1;
  int to_fd = -1;    // worker's stdin
  int from_fd = -1;  // worker's stdout
  std::vector<uint64_t> batch;  // leases of the batch it runs, in order
  size_t finished = 0;          // how many of `batch` have reported
  std::unique_ptr<TaskGroup> group;  // its sandboxed commands' (null: none)
  std::thread thread;
};

std::string SelfExecutable() {
#ifdef __APPLE__
  char buf[PATH_MAX];
  uint32_t size = sizeof buf;
  if (_NSGetExecutablePath(buf, &size) == 0) return buf;
  return "claw";
#else
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "claw";
  return std::string(buf, static_cast<size_t>(n));
#endif
}

WorkerPool::WorkerPool(WorkerPoolOptions options, Callback on_done, Logger log)
    : options_(std::move(options)), on_done_(std::move(on_done)), log_(std::move(log)) {
  if (options_.workers == 0) options_.workers = 1;
}

WorkerPool::~WorkerPool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    for (auto& w : workers_) {
      if (w->pid > 0) {
        kill(w->pid, SIGKILL);
        kill(w->pid, SIGCONT);
      }
    }
  }
  cv_.notify_all();
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
    if (w->pid > 0) {  // idle workers are still there: reap them
      std::string cause;
      Reap(w.get(), &cause);
    }
  }
}

namespace {

// pipe() with close-on-exec on both ends (posix_spawn's dup2 clears it on
// the child's copies).
bool CloexecPipe(int fds[2]) {
  if (pipe(fds) != 0) return false;
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  return true;
}

}  // namespace

bool WorkerPool::Spawn(Worker* w) {
  int to[2], from[2];
  if (!CloexecPipe(to)) return false;
  if (!CloexecPipe(from)) {
    close(to[0]);
    close(to[1]);
    return false;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from[1], 1);
  std::string mem = std::to_string(options_.limits.memory_bytes);
  std::string cpu = std::to_string(options_.limits.cpu_seconds);
  std::string slot = std::to_string(w->slot);
  std::string uid = std::to_string(
      options_.sandbox_uid_block == 0
          ? 0
          : options_.sandbox_uid_block + static_cast<uint32_t>(w->slot % kSandboxSlotsPerAgent));
  std::string disk = std::to_string(options_.limits.disk_bytes);
  std::string group = options_.group_prefix.empty() ? "" : options_.group_prefix + "/slot-" + slot;
  std::string scratch = options_.scratch_root.empty() ? "" : options_.scratch_root + "/slot-" + slot;
  std::vector<const char*> argv = {
      options_.executable.c_str(), "__worker", "--memory-bytes", mem.c_str(),
      "--cpu-seconds", cpu.c_str(), "--disk-bytes", disk.c_str(),
      "--slot", slot.c_str(), "--sandbox-uid", uid.c_str(),
      "--blob-dir", options_.blob_dir.c_str(), "--group", group.c_str(),
      "--cgroups", options_.group_mode.c_str(), "--scratch", scratch.c_str()};
  for (const std::string& d : options_.datasets) {
    argv.push_back("--dataset");
    argv.push_back(d.c_str());
  }
  if (!options_.misbehave.empty()) {
    argv.push_back("--misbehave");
    argv.push_back(options_.misbehave.c_str());
  }
  argv.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, options_.executable.c_str(), &fa, nullptr,
                       const_cast<char* const*>(argv.data()), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(to[0]);
  close(from[1]);
  if (rc != 0) {
    close(to[1]);
    close(from[0]);
    log_->error("cannot start worker exe={} error={}", options_.executable, strerror(rc));
    return false;
  }
  // The slot's group, as the agent sees it: to freeze and kill what the
  // worker's commands run (a cgroup), or the worker's descendants.
  std::unique_ptr<TaskGroup> g;
  if (!group.empty()) {
    GroupMode mode = GroupMode::kAuto;
    ParseGroupMode(options_.group_mode, &mode);
    g = OpenTaskGroup(group, pid, mode);
  }
  MutexLock lock(mu_);
  w->pid = pid;
  w->to_fd = to[1];
  w->from_fd = from[0];
  w->group = std::move(g);
  if (paused_) Freeze(w, true);
  return true;
}

void WorkerPool::Freeze(Worker* w, bool frozen) {
  if (w->pid <= 0) return;
  if (frozen) {
    kill(w->pid, SIGSTOP);
    if (w->group) w->group->Freeze();
    else SignalDescendants(w->pid, SIGSTOP);
  } else {
    if (w->group) w->group->Thaw();
    else SignalDescendants(w->pid, SIGCONT);
    kill(w->pid, SIGCONT);
  }
}

void WorkerPool::Reap(Worker* w, std::string* cause) {
  close(w->to_fd);
  close(w->from_fd);
  int status = 0;
  kill(w->pid, SIGCONT);
  pid_t reaped = waitpid(w->pid, &status, 0);
  // Nothing its commands started outlives it (the next worker of the slot
  // removes their scratch directory).
  if (w->group) w->group->KillAll();
  if (reaped == w->pid) {
    if (WIFSIGNALED(status)) {
      int sig = WTERMSIG(status);
      *cause = "worker killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
      if (sig == SIGXCPU) *cause += ": CPU time limit exceeded";
    } else if (WIFEXITED(status)) {
      *cause = "worker exited with status " + std::to_string(WEXITSTATUS(status));
    }
  }
  MutexLock lock(mu_);
  w->pid = -1;
}

Status WorkerPool::Start() {
  for (size_t i = 0; i < options_.workers; ++i) {
    auto w = std::make_unique<Worker>();
    w->slot = i;
    if (!Spawn(w.get())) return Unavailable("cannot start worker " + options_.executable);
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) w->thread = std::thread([this, p = w.get()] { Loop(p); });
  return Status::Ok();
}

void WorkerPool::Submit(std::vector<v1::WorkerTask> tasks) {
  {
    MutexLock lock(mu_);
    for (auto& t : tasks) {
      held_.insert(t.lease_id());
      queue_.push_back(std::move(t));
    }
  }
  cv_.notify_all();
}

void WorkerPool::Loop(Worker* w) {
  v1::WorkerRequest req;
  v1::WorkerResult res;
  while (true) {
    req.Clear();
    {
      MutexLock lock(mu_);
      while (!stopping_ && (queue_.empty() || paused_)) cv_.wait(lock);
      if (stopping_) return;
      // An even share of the queue, so that no worker idles while another
      // holds a long batch.
      size_t share = (queue_.size() + options_.workers - 1) / options_.workers;
      size_t take = std::clamp<size_t>(share, 1, options_.max_batch);
      w->batch.clear();
      w->finished = 0;
      for (size_t i = 0; i < take && !queue_.empty(); ++i) {
        w->batch.push_back(queue_.front().lease_id());
        *req.add_tasks() = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    bool broken = !WriteFrame(w->to_fd, req).ok();
    while (!broken && w->finished < w->batch.size()) {
      res.Clear();
      if (!ReadFrame(w->from_fd, &res).ok()) {
        broken = true;
        break;
      }
      bool deliver;
      {
        MutexLock lock(mu_);
        w->finished++;
        deliver = held_.erase(res.lease_id()) > 0;
      }
      if (deliver) {
        on_done_(TaskOutcome{res.lease_id(), res.ok(), std::move(*res.mutable_output()),
                             std::move(*res.mutable_error()), res.runtime_us()});
      }
    }
    if (!broken) continue;
    std::string cause = "worker died";
    Reap(w, &cause);
    std::vector<TaskOutcome> lost;
    {
      MutexLock lock(mu_);
      if (stopping_) return;
      // The task it was running is lost; the rest of its batch is requeued.
      for (size_t i = w->finished; i < w->batch.size(); ++i) {
        uint64_t lease = w->batch[i];
        if (!held_.count(lease)) continue;  // cancelled or taken back
        if (i == w->finished) {
          held_.erase(lease);
          lost.push_back(TaskOutcome{lease, false, "", cause, 0});
        } else {
          v1::WorkerTask t;
          for (const auto& orig : req.tasks()) {
            if (orig.lease_id() == lease) t = orig;
          }
          queue_.push_front(std::move(t));
        }
      }
      w->batch.clear();
    }
    for (auto& o : lost) {
      log_->warn("task lost lease={} cause={}", o.lease_id, o.error);
      on_done_(std::move(o));
    }
    if (!Spawn(w)) {
      log_->error("worker slot={} cannot be restarted; slot disabled", w->slot);
      return;
    }
    cv_.notify_all();
  }
}

bool WorkerPool::Cancel(uint64_t lease_id) {
  MutexLock lock(mu_);
  if (!held_.erase(lease_id)) return false;
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    if (it->lease_id() == lease_id) {
      queue_.erase(it);
      return true;
    }
  }
  for (auto& w : workers_) {
    for (size_t i = w->finished; i < w->batch.size(); ++i) {
      if (w->batch[i] == lease_id && i == w->finished && w->pid > 0) {
        kill(w->pid, SIGKILL);  // it is running now
      }
    }
  }
  return true;
}

void WorkerPool::Pause() {
  MutexLock lock(mu_);
  paused_ = true;
  for (auto& w : workers_) Freeze(w.get(), true);
}

void WorkerPool::Resume() {
  {
    MutexLock lock(mu_);
    paused_ = false;
    for (auto& w : workers_) Freeze(w.get(), false);
  }
  cv_.notify_all();
}

std::vector<uint64_t> WorkerPool::TakeBackAll() {
  MutexLock lock(mu_);
  std::vector<uint64_t> leases(held_.begin(), held_.end());
  held_.clear();
  queue_.clear();
  for (auto& w : workers_) {
    if (w->pid > 0 && w->finished < w->batch.size()) kill(w->pid, SIGKILL);
  }
  return leases;
}

std::vector<uint64_t> WorkerPool::HeldLeases() const {
  MutexLock lock(mu_);
  return {held_.begin(), held_.end()};
}

std::vector<uint64_t> WorkerPool::RunningLeases() const {
  MutexLock lock(mu_);
  std::vector<uint64_t> running;
  for (const auto& w : workers_) {
    // A worker runs its batch in order: the first unfinished task is the one.
    if (w->pid > 0 && w->finished < w->batch.size() && held_.count(w->batch[w->finished])) {
      running.push_back(w->batch[w->finished]);
    }
  }
  return running;
}

size_t WorkerPool::held() const {
  MutexLock lock(mu_);
  return held_.size();
}

std::vector<pid_t> WorkerPool::OwnPids() const {
  std::vector<pid_t> pids = WorkerPids();
  std::vector<pid_t> below = Descendants(pids);
  pids.insert(pids.end(), below.begin(), below.end());
  return pids;
}

std::string WorkerPool::GroupDescription() const {
  MutexLock lock(mu_);
  return !workers_.empty() && workers_[0]->group ? workers_[0]->group->Describe() : "";
}

bool WorkerPool::GroupsBindMemory() const {
  MutexLock lock(mu_);
  return !workers_.empty() && workers_[0]->group && workers_[0]->group->BindsMemory();
}

std::vector<pid_t> WorkerPool::WorkerPids() const {
  MutexLock lock(mu_);
  std::vector<pid_t> pids;
  for (const auto& w : workers_) {
    if (w->pid > 0) pids.push_back(w->pid);
  }
  return pids;
}

}  // namespace claw

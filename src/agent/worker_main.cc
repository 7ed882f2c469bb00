#include "agent/worker_main.h"

#include <sys/resource.h>
#include <sys/stat.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "agent/framing.h"
#include "claw.pb.h"
#include "common/blobs.h"
#include "common/clock.h"
#include "sandbox/scratch.h"
#include "sandbox/task_group.h"

namespace claw {
namespace {

void SetSoftLimit(int resource, rlim_t value) {
  rlimit rl;
  if (getrlimit(resource, &rl) != 0) return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? value : std::min(value, rl.rlim_max);
  setrlimit(resource, &rl);
}

uint64_t CpuSecondsUsed() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec);
}

}  // namespace

int RunWorker(const AppRegistry& apps, const WorkerLimits& limits, const WorkerSetup& setup) {
#ifdef __linux__
  // A worker (and, through the sandbox's --die-with-parent, the command it
  // runs) dies with its agent, even one killed mid-task with SIGKILL.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 0;  // the agent was gone already
#endif
  std::optional<BlobDir> blobs;
  if (!setup.blob_dir.empty()) blobs.emplace(setup.blob_dir);
  RunContext context;
  context.blobs = blobs ? &*blobs : nullptr;
  context.sandbox_uid = setup.sandbox_uid;
  context.caps = TaskCaps{limits.memory_bytes, limits.cpu_seconds, limits.disk_bytes};
  std::map<std::string, std::string, std::less<>> datasets;
  for (const std::string& d : setup.datasets) {
    auto eq = d.find('=');
    if (eq != std::string::npos) datasets[d.substr(0, eq)] = d.substr(eq + 1);
  }
  context.datasets = &datasets;
  context.misbehave = setup.misbehave;
  // What a task of the worker before it (killed mid-task) left behind.
  std::unique_ptr<TaskGroup> group;
  if (!setup.group.empty()) {
    GroupMode mode = GroupMode::kAuto;
    ParseGroupMode(setup.group_mode, &mode);
    group = OpenTaskGroup(setup.group, getpid(), mode);
    context.group = group.get();
  }
  if (!setup.scratch_dir.empty()) {
    // Its slot's directory, inside the agent's own (0711): used only if it
    // is a real directory of this user's, never through a link.
    mkdir(setup.scratch_dir.c_str(), 0755);
    struct stat st;
    if (lstat(setup.scratch_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
        st.st_uid == geteuid()) {
      EmptyDirectory(setup.scratch_dir);
      context.scratch_dir = setup.scratch_dir;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  SetSoftLimit(RLIMIT_CORE, 0);
  if (limits.memory_bytes > 0) SetSoftLimit(RLIMIT_AS, limits.memory_bytes);
  v1::WorkerRequest req;
  v1::WorkerResult res;
  while (ReadFrame(0, &req).ok()) {
    for (const auto& task : req.tasks()) {
      if (limits.cpu_seconds > 0) {
        SetSoftLimit(RLIMIT_CPU, CpuSecondsUsed() + limits.cpu_seconds + 1);
      }
      res.Clear();
      res.set_lease_id(task.lease_id());
      Stopwatch watch;
      const App* app = apps.Find(task.app());
      if (!app) {
        res.set_error("unknown app '" + task.app() + "'");
      } else {
        auto out = app->Run(task.params(), context);
        if (out.ok()) {
          res.set_ok(true);
          res.set_output(std::move(out).value());
        } else {
          res.set_error(out.status().ToString());
        }
      }
      res.set_runtime_us(static_cast<uint64_t>(watch.Micros()));
      if (!WriteFrame(1, res).ok()) return 0;  // the agent is gone
    }
  }
  return 0;
}

}  // namespace claw

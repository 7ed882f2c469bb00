// The worker process: runs built-in app tasks sent by its agent over stdin,
// writing each result to stdout as it finishes. It lives across many tasks
// (no process start per task) and exits when stdin closes.
//
// Resource limits are applied to itself at start (address space, no core
// files) and before each task (CPU seconds for that task, by raising the
// soft RLIMIT_CPU to what it has used plus the allowance). A task that
// exceeds them kills the worker; the agent reports the task failed and
// starts a new worker.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/app.h"

namespace claw {

// The contributor's limits (agent flags --memory-mb, --cpu-seconds,
// --disk-mb): for the worker itself, and the ceiling of every sandboxed
// task's.
struct WorkerLimits {
  uint64_t memory_bytes = 0;    // RLIMIT_AS; 0: unlimited
  uint64_t cpu_seconds = 3600;  // per task; 0: unlimited
  uint64_t disk_bytes = 0;      // a sandboxed task's scratch directory; 0: the job's own limit
};

struct WorkerSetup {
  std::string blob_dir;     // the agent's blob cache (RunContext::blobs); empty: none
  uint32_t sandbox_uid = 0; // what sandboxes of this worker's slot run as
  std::string group;        // its slot's TaskGroup ("claw-.../slot-0"); empty: none
  std::string group_mode = "auto";
  std::string scratch_dir;  // its slot's scratch directory, emptied at start
  std::vector<std::string> datasets;  // the agent's local datasets, NAME=DIR
  std::string misbehave;              // RunContext::misbehave
};

// Runs the worker loop on fds 0/1. Returns the process exit code.
int RunWorker(const AppRegistry& apps, const WorkerLimits& limits, const WorkerSetup& setup);

}  // namespace claw

// App: one kind of workload. Adding a workload means one class here-shaped in
// src/apps/ and one line in the registry.
//
//   Plan        job spec -> task specs (validates params; errors name the field)
//   Run         one task's params -> its output bytes (runs in a worker process)
//   Merge       all outputs, in task order -> the job's result (JSON)
//   Equivalent  do two outputs of the same task agree? (exactly or within a
//               tolerance, as the app's numerics demand; Difference says
//               what differs when they do not)
//
// Implementations are stateless and thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/types.h"

namespace claw {

class BlobDir;
class TaskGroup;  // sandbox/task_group.h

// What the contributor lets any one task use on their device, whatever the
// job asks (0: no cap of theirs). The smaller of the two binds.
struct TaskCaps {
  uint64_t memory_bytes = 0;
  uint64_t cpu_seconds = 0;
  uint64_t disk_bytes = 0;
};

// What a running task may use besides its params.
struct RunContext {
  // The agent's blob cache: the task's input blobs (App::TaskInputBlobs) are
  // here when Run starts, and the output blobs its output names
  // (App::OutputBlobs) must be here when Run returns. Null where the caller
  // keeps no blobs (then apps that need them fail the task).
  const BlobDir* blobs = nullptr;
  // The uid that sandboxes of this worker's slot run as when the agent is
  // root (sandbox/sandbox.h); 0: none chosen.
  uint32_t sandbox_uid = 0;
  TaskCaps caps;
  // The group that holds a sandboxed command's processes (this worker's
  // slot's cgroup); null: the sandbox finds them as descendants.
  TaskGroup* group = nullptr;
  // Where sandboxed tasks' scratch directories go (the worker's, emptied
  // when it starts); empty: the system's temporary directory.
  std::string scratch_dir;
  // The contributor's local datasets by name (directories the agent's
  // config names; they never leave the device). Null: none.
  const std::map<std::string, std::string, std::less<>>* datasets = nullptr;
  // A liar, on purpose, for benchmarks and fault tests (`claw agent
  // --misbehave`): "flip" or "scale=K" changes what a training round's task
  // returns, "slow=K" makes it take K times as long. Empty: honest.
  std::string misbehave;
};

class App {
 public:
  virtual ~App() = default;
  virtual std::string_view Name() const = 0;
  // On error: InvalidArgument naming the field ("params.paths: ...").
  virtual Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const = 0;
  // On error: the task failed (the reason is reported to the coordinator).
  virtual Result<std::string> Run(std::string_view task_params, const RunContext& ctx) const = 0;
  // `outputs[i]` is the output of task i. On error the job fails with it.
  virtual Result<nlohmann::json> Merge(const JobSpec& spec,
                                       const std::vector<std::string_view>& outputs) const = 0;
  // Whether two outputs of the task with `task_params` agree. The params
  // may say on what (exec's "compare"): the job's author decides that,
  // never an agent.
  virtual bool Equivalent(std::string_view task_params, std::string_view a,
                          std::string_view b) const = 0;
  // For two outputs that are not Equivalent: what differs, in a few words
  // for the job's error (exec: "stdout", "the file frame1.png").
  virtual std::string Difference(std::string_view task_params, std::string_view a,
                                 std::string_view b) const;
  // Replication and quorum for jobs that do not set them. Apps whose results
  // cannot be checked cheaply any other way should ask for 2/2.
  // Whether this process can run the app's tasks (exec needs a sandbox,
  // train and infer the ML library). Agents report what they can run, and
  // get only tasks they can.
  virtual Status Runnable() const { return Status::Ok(); }
  // The apps an agent must be able to run to take this job's tasks.
  virtual std::vector<std::string> Needs(const JobSpec& spec) const { return {spec.app}; }
  // The longest a task may run by its own params (exec: its timeout_s); 0:
  // it declares none. A lease on it is at least that long.
  virtual double TaskSeconds(std::string_view /*task_params*/) const { return 0; }
  struct Redundancy {
    uint32_t replication = 1;
    uint32_t quorum = 1;
  };
  virtual Redundancy DefaultRedundancy() const { return {}; }

  // Jobs that grow as results come in (early-stopping sweeps). Each time a
  // task of such a job settles, Expand sees every task so far (params, and
  // output once settled, else empty) and returns tasks to append, which run
  // before the job's other pending tasks. The job ends when every task is
  // settled and the last call added none. The new tasks are stored in the
  // same transaction as the result that caused them, so a restart neither
  // loses nor repeats them; Expand must derive what it already did from the
  // tasks it is shown.
  struct TaskView {
    std::string_view params;
    std::string_view output;  // empty until settled
  };
  virtual bool Grows(const JobSpec&) const { return false; }
  virtual std::vector<TaskSpec> Expand(const JobSpec& /*spec*/,
                                       const std::vector<TaskView>& /*tasks*/,
                                       uint32_t /*settled*/) const {
    return {};
  }

  // Jobs that may end before every task is done (JobSpec::close_done,
  // close_after): Merge then gets an empty output for each task that was
  // cancelled or failed, and at least one done.
  virtual bool ClosesEarly() const { return false; }

  // Jobs that something beside the scheduler drives (round-based training:
  // src/rounds/). Such a job may plan no tasks, and it ends only when its
  // driver ends it (Scheduler::EndJob), never by its tasks.
  virtual bool Driven() const { return false; }
  // Apps whose jobs only the coordinator submits (a training job's rounds);
  // users cannot.
  virtual bool InternalOnly() const { return false; }

  // For apps with files: checks a task's output before it is accepted,
  // where the coordinator can read blobs (e.g. that a model delta has the
  // model's shapes and finite values), once the files it names are there.
  // It may amend the output with what only the coordinator can vouch for
  // (`agent`, the one that sent it). An error makes the result a failure of
  // the task that counts against the agent's reputation, and changes
  // nothing else.
  virtual Status CheckOutput(std::string_view /*task_params*/, std::string* /*output*/,
                             const std::string& /*agent*/, const BlobDir& /*blobs*/) const {
    return Status::Ok();
  }

  // Blobs (content-addressed files, by SHA-256 hex; common/blobs.h), for
  // apps that read or write files:
  //   SpecInputBlobs  every blob a job spec names; the submitter must own each
  //   TaskInputBlobs  what the agent fetches (and verifies) before the task runs
  //   OutputBlobs     what a task's output names; the agent uploads them before
  //                   reporting, and the coordinator accepts the output only
  //                   once it holds them all
  // Inputs are parsed by the app's own Plan or Run, so malformed ones give {}.
  // True if the app's tasks may read or write blobs at all (the agent then
  // asks the three below; for other apps it never does).
  virtual bool HasFiles() const { return false; }
  virtual std::vector<std::string> SpecInputBlobs(const JobSpec&) const { return {}; }
  virtual std::vector<std::string> TaskInputBlobs(std::string_view /*task_params*/) const {
    return {};
  }
  virtual std::vector<std::string> OutputBlobs(std::string_view /*task_output*/) const {
    return {};
  }
  // Of TaskInputBlobs, those the agent must fetch given what its cache
  // holds (a model it can rebuild from one it has and a small update need
  // not travel). Run must then cope with what was fetched.
  virtual std::vector<std::string> BlobsToFetch(std::string_view task_params,
                                                const BlobDir& /*cache*/) const {
    return TaskInputBlobs(task_params);
  }
};

// The apps a process knows, by name. Filled at start-up, read-only after.
class AppRegistry {
 public:
  void Register(std::unique_ptr<App> app);
  const App* Find(std::string_view name) const;  // nullptr if unknown
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, std::unique_ptr<App>, std::less<>> apps_;
};

}  // namespace claw

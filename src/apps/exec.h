// exec: any command-line program as a job, one task per combination of the
// sweep's values, each run in the sandbox (sandbox/sandbox.h).
//
// params:
//   command    ["prog", "arg", ...]; "{name}" in any argument is replaced by
//              the task's value of `name`
//   sweep      {"name": values, ...}: "A..B" (integers A to B), or a list of
//              numbers or strings; the tasks are the grid of all of them
//              (none: one task)
//   timeout_s  wall-clock limit per task (default 600, at most 86400); also
//              the CPU time all its processes may use together
//   memory_mb  the task's memory, its /tmp and /dev/shm files included
//              (where the agent holds it in a cgroup), and the address space
//              of each of its processes (default 2048)
//   output_kb  stdout and stderr kept per task, each (default 64, at most 1024)
//   inputs     {"path": "<sha256>", ...}: blobs placed in the scratch directory
//              under these relative paths before the command starts (every
//              task gets all of them; the submitter must have uploaded them)
//   outputs    ["*.png", "out/*.txt", ...]: glob patterns (fnmatch, `*` does
//              not cross `/`) of files in the scratch directory collected as
//              blobs after the command ends; each must match at least one
//              file, and symbolic links are refused, never followed
//   file_mb    the largest file a task may write (default 1024)
//   disk_mb    all a task keeps in its scratch directory at once (default
//              4096): past it the task is stopped
//
// Each limit is capped by the contributor's (agent flags --memory-mb,
// --cpu-seconds, --disk-mb): the smaller binds.
//   processes  how many processes a task may have at once (default 256,
//              at most 4096): a fork bomb stops there
//   compare    what replicas of a task must agree on: a list of "exit",
//              "stdout", "stderr", "files" (default: all four). A command
//              that prints timings or dates but writes reproducible files
//              says ["files"]; one whose output cannot be reproduced at all
//              runs with "replication": 1 instead.
//
// Paths and patterns are relative and may not contain "..": nothing outside
// the scratch directory is ever named.
//
// A task's output is {"vars": {...}, "exit": 0, "stdout": "...",
// "stderr": "...", "files": [{"path", "sha256", "size"}, ...]}; a non-zero
// exit, a timeout or a signal fails the task with the tail of stderr. The
// job's result lists the tasks' outputs in order. Replicas agree when the
// parts named by `compare` are identical (files: the same paths with the
// same content hashes), and a disagreement names the part that differed.
#pragma once

#include "core/app.h"

namespace claw {

class ExecApp final : public App {
 public:
  static constexpr size_t kMaxArgs = 256;
  static constexpr size_t kMaxArgBytes = 4096;
  static constexpr size_t kMaxInputs = 1000;
  static constexpr size_t kMaxOutputPatterns = 64;
  static constexpr size_t kMaxOutputFiles = 1000;  // per task
  static constexpr size_t kMaxPathBytes = 1024;

  std::string_view Name() const override { return "exec"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override;
  Result<std::string> Run(std::string_view task_params, const RunContext& ctx) const override;
  Result<nlohmann::json> Merge(const JobSpec& spec,
                               const std::vector<std::string_view>& outputs) const override;
  bool Equivalent(std::string_view params, std::string_view a, std::string_view b) const override;
  std::string Difference(std::string_view params, std::string_view a,
                         std::string_view b) const override;
  Redundancy DefaultRedundancy() const override { return {2, 2}; }
  double TaskSeconds(std::string_view task_params) const override;
  bool HasFiles() const override { return true; }
  Status Runnable() const override;
  std::vector<std::string> SpecInputBlobs(const JobSpec& spec) const override;
  std::vector<std::string> TaskInputBlobs(std::string_view task_params) const override;
  std::vector<std::string> OutputBlobs(std::string_view task_output) const override;
};

}  // namespace claw

// exec: any command-line program as a job, one task per combination of the
// sweep's values, each run in the sandbox (apps/sandbox.h).
//
// params:
//   command    ["prog", "arg", ...]; "{name}" in any argument is replaced by
//              the task's value of `name`
//   sweep      {"name": values, ...}: "A..B" (integers A to B), or a list of
//              numbers or strings; the tasks are the grid of all of them
//              (none: one task)
//   timeout_s  wall-clock limit per task (default 600, at most 86400)
//   memory_mb  address-space limit per task (default 2048)
//   output_kb  stdout and stderr kept per task, each (default 64, at most 1024)
//
// A task's output is {"vars": {...}, "exit": 0, "stdout": "...",
// "stderr": "..."}; a non-zero exit, a timeout or a signal fails the task
// with the tail of stderr. The job's result lists the tasks' outputs in
// order. Replicas agree when their outputs are identical. Input and output
// files (blobs) are not supported yet.
#pragma once

#include "core/app.h"

namespace claw {

class ExecApp final : public App {
 public:
  static constexpr size_t kMaxArgs = 256;
  static constexpr size_t kMaxArgBytes = 4096;

  std::string_view Name() const override { return "exec"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override;
  Result<std::string> Run(std::string_view task_params) const override;
  Result<nlohmann::json> Merge(const JobSpec& spec,
                               const std::vector<std::string_view>& outputs) const override;
  bool Equivalent(std::string_view a, std::string_view b) const override { return a == b; }
  Redundancy DefaultRedundancy() const override { return {2, 2}; }
};

}  // namespace claw

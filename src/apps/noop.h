// noop: tasks that do nothing and return nothing. Measures the network's
// per-task overhead (benchmarks) and exercises scheduling (tests).
//
// params: {} (the task count comes from the spec's "tasks", default 1).
// The job's result is {"tasks": N}.
#pragma once

#include "core/app.h"

namespace claw {

class NoopApp final : public App {
 public:
  std::string_view Name() const override { return "noop"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override;
  Result<std::string> Run(std::string_view task_params, const RunContext& ctx) const override;
  Result<nlohmann::json> Merge(const JobSpec& spec,
                               const std::vector<std::string_view>& outputs) const override;
  bool Equivalent(std::string_view params, std::string_view a, std::string_view b) const override { return a == b; }
};

}  // namespace claw

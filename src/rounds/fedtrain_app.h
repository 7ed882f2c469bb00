// App `fedtrain`: one model trained across devices in rounds (docs/adr/
// 0007-training-in-rounds.md). The job itself runs no task: the round
// driver (driver.h) runs its rounds as `fedround` jobs and ends it. Its
// params are a TrainingSpec (training_spec.h), checked here at submission.
#pragma once

#include "core/app.h"

namespace claw::rounds {

class FedTrainApp final : public App {
 public:
  std::string_view Name() const override { return "fedtrain"; }
  // No tasks; InvalidArgument naming the field for a bad spec.
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override;
  Result<std::string> Run(std::string_view task_params, const RunContext& ctx) const override;
  Result<nlohmann::json> Merge(const JobSpec& spec,
                               const std::vector<std::string_view>& outputs) const override;
  bool Equivalent(std::string_view, std::string_view a, std::string_view b) const override {
    return a == b;
  }
  bool Driven() const override { return true; }
  bool HasFiles() const override { return true; }
  std::vector<std::string> SpecInputBlobs(const JobSpec& spec) const override;
};

}  // namespace claw::rounds

// App `fedround`: one round of a training job (docs/adr/0007-training-in-
// rounds.md), submitted only by the round driver (driver.h), never by users.
//
// A round job's params:
//   {"kind": "init" | "train" | "eval", "round": r, "training": {...the
//    training spec, TrainingSpec::ToJson()...}, "seed": S,
//    "model": sha (the round's model; not for init),
//    "base": sha, "update": sha (optional: the model before and the update
//    that made "model" from it, for agents that hold "base")}
//
//   init   1 task: the arch's initial weights for the seed -> "model"
//   train  ceil(workers × overprovision) tasks: each evaluates the model
//          on its slice of the test set, trains `inner.steps` steps on its
//          shard, and returns the difference, compressed -> "delta"
//   eval   one task per slice of the test set: evaluation only (the last
//          model's), and a checkpoint for `infer`
//
// A train task's output: {"kind": "train", "round", "task", "delta": sha,
// "samples", "train_loss", "eval": {"loss_sum", "correct", "count"},
// "seconds", "files": [...]}; the coordinator adds "agent" (CheckOutput)
// after checking the delta: the model's names and shapes, finite values,
// at most the samples a task may train on, at most twice a fp32 model's
// size.
#pragma once

#include <string_view>

#include "core/app.h"

namespace claw::rounds {

// What an agent lists among its apps when it can take part in secure
// aggregation (agent/secagg_device.h); rounds with it need it.
inline constexpr std::string_view kSecAggCapability = "secagg";

class RoundApp final : public App {
 public:
  std::string_view Name() const override { return "fedround"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override;
  Result<std::string> Run(std::string_view task_params, const RunContext& ctx) const override;
  Result<nlohmann::json> Merge(const JobSpec& spec,
                               const std::vector<std::string_view>& outputs) const override;
  bool Equivalent(std::string_view task_params, std::string_view a,
                  std::string_view b) const override;
  std::string Difference(std::string_view task_params, std::string_view a,
                         std::string_view b) const override;
  Status Runnable() const override;
  std::vector<std::string> Needs(const JobSpec& spec) const override;
  bool ClosesEarly() const override { return true; }
  bool InternalOnly() const override { return true; }
  Status CheckOutput(std::string_view task_params, std::string* output, const std::string& agent,
                     const BlobDir& blobs) const override;
  bool HasFiles() const override { return true; }
  std::vector<std::string> SpecInputBlobs(const JobSpec& spec) const override;
  std::vector<std::string> TaskInputBlobs(std::string_view task_params) const override;
  std::vector<std::string> OutputBlobs(std::string_view task_output) const override;
  std::vector<std::string> BlobsToFetch(std::string_view task_params,
                                        const BlobDir& cache) const override;

 private:
  Result<nlohmann::json> MergeChecked(const JobSpec& spec,
                                      const std::vector<std::string_view>& outputs) const;
};

}  // namespace claw::rounds

// infer: batch inference of a trained model (a train job's model.pt) over
// an image set split into shards, one task each (ml/trainer.h's Predict).
//
// params:
//   model    the checkpoint blob (train's output "model.pt")
//   dataset  as for train; `split` picks which images: "test" (default,
//            10,000) or "train" (60,000); labels, when the dataset has them,
//            give the accuracy
//   shards   how many tasks (default 10); shard i takes images
//            [i*n/shards, (i+1)*n/shards)
//   threads  torch threads per task (default 1)
//
// A task's output: {"shard", "begin", "end", "predictions": "7201..." (one
// digit per image), "correct", "seconds"}. The job's result: the
// predictions of every shard joined in order, "count", "accuracy" and
// "images_per_second" (images over the summed task time).
//
// Replicas agree when their predictions match on at least kAgreement of
// the images (machines may round a borderline logit differently).
#pragma once

#include "core/app.h"

namespace claw {

class InferApp final : public App {
 public:
  static constexpr double kAgreement = 0.995;
  static constexpr int64_t kMaxShards = 100'000;

  std::string_view Name() const override { return "infer"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override;
  Result<std::string> Run(std::string_view task_params, const RunContext& ctx) const override;
  Result<nlohmann::json> Merge(const JobSpec& spec,
                               const std::vector<std::string_view>& outputs) const override;
  bool Equivalent(std::string_view params, std::string_view a, std::string_view b) const override;
  bool HasFiles() const override { return true; }
  Status Runnable() const override;
  std::vector<std::string> SpecInputBlobs(const JobSpec& spec) const override;
  std::vector<std::string> TaskInputBlobs(std::string_view task_params) const override;
  std::vector<std::string> OutputBlobs(std::string_view task_output) const override;
  std::vector<std::string> Needs(const JobSpec& spec) const override;
};

}  // namespace claw

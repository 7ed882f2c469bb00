// train: one training run (a trial) of a Fashion-MNIST classifier on
// libtorch (ml/trainer.h), as a job of one task.
//
// params:
//   dataset       {"train_images", "train_labels", "test_images",
//                 "test_labels"}: blobs of the IDX files (gzipped or not);
//                 `claw submit --app train --dataset DIR` uploads them
//   model         "cnn" (default) or "mlp"; width, layers, dropout
//   lr, batch, epochs, optimizer ("sgd" with momentum, or "adam"),
//   momentum, weight_decay, seed
//   train_limit, test_limit   use only the first N images (0: all)
//   threads       torch threads for the task (default 1; keep slots x
//                 threads <= cores on the agent)
//   resume        a checkpoint blob to continue from (its epoch + 1 to epochs)
//   save_model    keep the trained model as a blob (default true)
//
// A task's output: {"params": {...}, "epochs": [{"epoch", "loss",
// "accuracy", "test_loss", "test_accuracy", "seconds"}], "final": the last
// epoch, "parameters": N, "files": [{"path": "model.pt", "sha256", "size"}]}.
// The job's result: {"trials": [...], "best": index}. A run whose loss stops
// being finite ends there with "diverged": true and no test metric or model:
// in a sweep that is a result (ranked last), not a failure.
//
// Replicas on different machines do not agree bit for bit (floating-point
// reductions differ), so two results are equivalent when they trained the
// same epochs and their final test accuracy is within kAccuracyTolerance
// and test loss within kLossTolerance (relative). The default is one replica:
// a training run is expensive, and its accuracy is checked on the test set.
#pragma once

#include "core/app.h"

namespace claw {

class TrainApp final : public App {
 public:
  static constexpr double kAccuracyTolerance = 0.02;
  static constexpr double kLossTolerance = 0.10;

  std::string_view Name() const override { return "train"; }
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

  // Checks one trial's params (as in a train job's params) and fills in
  // defaults; InvalidArgument naming the field. `prefix` names the object
  // in errors ("params").
  static Result<nlohmann::json> CheckTrial(const nlohmann::json& params, const std::string& prefix);

 private:
  // The blobs a trial's params name: the dataset's files and any checkpoint.
  static std::vector<std::string> TrialBlobs(const nlohmann::json& params);
};

}  // namespace claw

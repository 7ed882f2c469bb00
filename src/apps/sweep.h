// sweep: many runs of another app (a trial each) over a space of its
// parameters, as one job: the hyperparameter search of ML work.
//
// params:
//   app        the app each trial runs (default "train"); it must plan one
//              task per job
//   base       that app's params shared by every trial (e.g. the dataset)
//   space      {"name": values}: a list of values (grid: every combination;
//              random: a uniform choice), or a distribution for random:
//              {"uniform": [a, b]}, {"log_uniform": [a, b]},
//              {"int_uniform": [a, b]}, {"choice": [...]}
//   method     "grid" (default), "random", or "asha"
//   trials     random: how many (default 20); asha: sample this many at
//              random instead of taking the grid
//   asha       {"min_epochs": 1, "max_epochs": 9, "eta": 3}: asynchronous
//              successive halving (Li et al., 2020). Every trial starts with
//              min_epochs; rungs are min_epochs x eta^k up to max_epochs.
//              Whenever a trial finishes a rung and is in the top 1/eta of
//              those finished there, it is promoted: a new task resumes it
//              from its checkpoint (the inner app's "resume") up to the next
//              rung. Promotions run before trials not yet started.
//   metric     what ranks trials (default "test_accuracy"), read from a
//              trial's output "final" object or its top level
//   mode       "max" (default) or "min"
//
// Random draws come from the job's seed, so a spec always makes the same
// trials. Each task is one trial: its output is the inner app's output with
// "app", "trial" (its index) and "values" (its point in the space) added; files,
// validation and equivalence are the inner app's. The job's result:
// {"metric", "mode", "trials": [...], "ranking": [indexes, best first],
// "best": {"trial", "values", "metric"}, "compute": {"tasks", "trial_epochs"}}.
// Under asha a trial's entry is its output at the highest rung it reached
// (with "rung"), and trials rank by rung first, then metric.
#pragma once

#include <map>

#include "core/app.h"

namespace claw {

class SweepApp final : public App {
 public:
  static constexpr size_t kMaxTrials = 100'000;

  // `apps`: the apps it may sweep over (pointers into a registry that
  // outlives it).
  explicit SweepApp(std::map<std::string, const App*, std::less<>> apps) : apps_(std::move(apps)) {}
  std::string_view Name() const override { return "sweep"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override;
  Result<std::string> Run(std::string_view task_params, const RunContext& ctx) const override;
  Result<nlohmann::json> Merge(const JobSpec& spec,
                               const std::vector<std::string_view>& outputs) const override;
  bool Equivalent(std::string_view params, std::string_view a, std::string_view b) const override;
  bool HasFiles() const override { return true; }
  std::vector<std::string> Needs(const JobSpec& spec) const override;
  bool Grows(const JobSpec& spec) const override;
  std::vector<TaskSpec> Expand(const JobSpec& spec, const std::vector<TaskView>& tasks,
                               uint32_t settled) const override;
  std::vector<std::string> SpecInputBlobs(const JobSpec& spec) const override;
  std::vector<std::string> TaskInputBlobs(std::string_view task_params) const override;
  std::vector<std::string> OutputBlobs(std::string_view task_output) const override;

  // The points of the space in trial order, checked (errors name the field).
  static Result<std::vector<nlohmann::json>> Points(const JobSpec& spec);

  struct Asha {
    int64_t min_epochs = 1, max_epochs = 9, eta = 3;
    std::vector<int64_t> rungs;  // epochs at each rung
  };
  static Result<Asha> ReadAsha(const nlohmann::json& params);

 private:
  // The inner app a sweep spec or task names; nullptr if unknown.
  const App* Inner(std::string_view name) const;
  std::map<std::string, const App*, std::less<>> apps_;
};

}  // namespace claw

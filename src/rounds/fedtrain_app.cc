#include "rounds/fedtrain_app.h"

#include "common/blobs.h"
#include "rounds/training_spec.h"

namespace claw::rounds {

Result<std::vector<TaskSpec>> FedTrainApp::Plan(const JobSpec& spec) const {
  auto t = ParseTrainingSpec(spec.params);
  if (!t.ok()) return t.status();
  if (spec.tasks > 0) return InvalidArgument("spec.tasks: a fedtrain job's rounds plan its tasks (params.workers)");
  if (spec.replication > 1) {
    return InvalidArgument("spec.replication: rounds run each task once (deltas are checked, and "
                           "robust aggregation bounds what a liar can do)");
  }
  return std::vector<TaskSpec>{};
}

Result<std::string> FedTrainApp::Run(std::string_view, const RunContext&) const {
  return FailedPrecondition("a fedtrain job runs its rounds as fedround tasks, never a task of its own");
}

Result<nlohmann::json> FedTrainApp::Merge(const JobSpec&, const std::vector<std::string_view>&) const {
  return FailedPrecondition("a fedtrain job is ended by its round driver");
}

std::vector<std::string> FedTrainApp::SpecInputBlobs(const JobSpec& spec) const {
  std::vector<std::string> out;
  const auto& p = spec.params;
  if (p.contains("init") && p["init"].is_string()) out.push_back(p["init"]);
  for (const char* field : {"dataset", "data"}) {  // IDX files, or a script's arrays
    if (p.contains(field) && p[field].is_object()) {
      for (const auto& [k, v] : p[field].items()) {
        if (v.is_string() && IsBlobHash(v.get<std::string>())) out.push_back(v);
      }
    }
  }
  if (p.contains("script") && p["script"].is_string() && IsBlobHash(p["script"].get<std::string>())) {
    out.push_back(p["script"]);
  }
  return out;
}

}  // namespace claw::rounds

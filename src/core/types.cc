#include "core/types.h"

namespace claw {

const char* JobStateName(JobState s) {
  switch (s) {
    case JobState::kRunning: return "running";
    case JobState::kDone: return "done";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "unknown";
}

std::optional<JobState> ParseJobState(std::string_view s) {
  for (JobState st : {JobState::kRunning, JobState::kDone, JobState::kFailed, JobState::kCancelled}) {
    if (s == JobStateName(st)) return st;
  }
  return std::nullopt;
}

nlohmann::json JobSpec::ToJson() const {
  nlohmann::json j = {{"app", app},
                      {"params", params},
                      {"seed", seed},
                      {"priority", priority},
                      {"max_attempts", max_attempts},
                      {"task_timeout_s", task_timeout.count() / 1'000'000},
                      {"replication", replication},
                      {"quorum", quorum},
                      {"max_replicas", max_replicas},
                      {"quorum_wait_s", quorum_wait.count() / 1'000'000},
                      {"adaptive", adaptive},
                      {"spot_check", spot_check}};
  if (tasks > 0) j["tasks"] = tasks;  // 0: a driven job's (it plans none)
  if (!name.empty()) j["name"] = name;
  if (close_done > 0) j["close_done"] = close_done;
  if (close_after.count() > 0) {
    j["close_after_s"] = close_after.count() / 1'000'000;
    j["close_min"] = close_min;
  }
  return j;
}

}  // namespace claw

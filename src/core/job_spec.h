// Parsing and validating a job spec (the JSON a client submits).
//
//   {"app": "montecarlo", "name": "call", "tasks": 100, "seed": 7,
//    "priority": 0, "max_attempts": 3, "task_timeout_s": 3600,
//    "replication": 2, "quorum": 2, "max_replicas": 4, "adaptive": true,
//    "params": {...app-specific...}}
//
// Redundancy defaults to the app's (App::DefaultRedundancy). A replication
// given without a quorum gets a majority (2 of 2, 2 of 3, 3 of 4, ...);
// max_replicas defaults to 4 × replication, at most 10 (1 when replication is 1).
//
// Validation is complete before anything is stored: unknown fields, wrong
// types, out-of-range values, an unknown app and the app's own parameter
// checks all fail here with an error naming the field.
#pragma once

#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/app.h"
#include "core/types.h"

namespace claw {

inline constexpr size_t kMaxSpecBytes = 1 << 20;
inline constexpr uint32_t kMaxTasksPerJob = 1'000'000;
inline constexpr uint32_t kMaxReplicas = 10;

struct PlannedJob {
  JobSpec spec;
  std::vector<TaskSpec> tasks;
};

// Parses, validates and plans. Pure: the same input gives the same plan.
Result<PlannedJob> ParseAndPlanJob(std::string_view json_text, const AppRegistry& apps);

// Parses a spec that was stored by this program (JobSpec::ToJson()).
Result<JobSpec> ParseJobSpec(std::string_view json_text, const AppRegistry& apps);

}  // namespace claw

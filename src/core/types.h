// The job and task model shared by every layer: ids, states, the parsed job
// spec, and the records the store keeps. Plain values; no behaviour beyond
// naming states.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"

namespace claw {

using JobId = std::string;
using AgentId = std::string;
using LeaseId = uint64_t;

enum class TaskState : uint8_t { kPending = 0, kLeased = 1, kDone = 2, kFailed = 3, kCancelled = 4 };
enum class JobState : uint8_t { kRunning = 0, kDone = 1, kFailed = 2, kCancelled = 3 };

const char* JobStateName(JobState s);
std::optional<JobState> ParseJobState(std::string_view s);
inline bool IsFinal(JobState s) { return s != JobState::kRunning; }

// A validated submission. Produced by ParseJobSpec; immutable afterwards.
struct JobSpec {
  std::string name;
  std::string app;
  nlohmann::json params = nlohmann::json::object();  // app-specific, validated by the app
  uint32_t tasks = 0;         // 0: the app chooses
  uint64_t seed = 1;          // results are a deterministic function of (spec, seed)
  int32_t priority = 0;       // higher runs first, within one user
  uint32_t max_attempts = 3;  // failures + expired leases before the task (and job) fails
  Duration task_timeout = std::chrono::hours(1);  // a lease never outlives this

  nlohmann::json ToJson() const;
};

// One unit of work as planned by an app.
struct TaskSpec {
  std::string params;     // opaque to everything but the app
  double cost_flop = 0;   // the app's estimate of the work, for leases and credit
};

// ---- what the store keeps ------------------------------------------------

struct JobRecord {
  JobId id;
  std::string owner;
  std::string spec_json;  // JobSpec::ToJson(), canonical
  JobState state = JobState::kRunning;
  Time created;
  Time finished;
  uint32_t n_tasks = 0;
  std::string result_json;  // set when done
  std::string error;        // set when failed
  // Run time of the completed tasks as their workers measured it, summed.
  // Stored when the job ends; kept in memory while it runs.
  uint64_t task_runtime_us = 0;
};

struct TaskRecord {
  JobId job;
  uint32_t index = 0;
  std::string params;
  double cost_flop = 0;
  TaskState state = TaskState::kPending;
  uint32_t attempts = 0;
  std::string output;  // set when done
  uint64_t runtime_us = 0;
};

struct LeaseRecord {
  LeaseId id = 0;
  JobId job;
  uint32_t index = 0;
  AgentId agent;
  Time deadline;
};

struct AgentRecord {
  AgentId id;
  std::string public_key;
  std::string device_json;
  Time enrolled;
};

}  // namespace claw

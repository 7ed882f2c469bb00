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
  // Redundancy: each task runs on `replication` different agents and is
  // settled when `quorum` of the results agree (App::Equivalent). On
  // disagreement more replicas are issued, up to `max_replicas` results.
  uint32_t replication = 1;
  uint32_t quorum = 1;
  uint32_t max_replicas = 1;
  // How long a task whose answers disagree waits for an agent that may
  // break the tie (one that has not answered it, of another owner) before
  // it fails with "no quorum".
  Duration quorum_wait = std::chrono::minutes(10);
  // Adaptive replication: a task may run once, unchecked, on an agent with a
  // long clean record; `spot_check` of those still run on a second agent
  // (docs/security.md says what that buys against a liar).
  bool adaptive = true;
  double spot_check = 0.05;
  // Closing early (apps that merge what is done: App::ClosesEarly). The job
  // ends when `close_done` of its tasks are done, or, once `close_after` has
  // passed since it was created, as soon as `close_min` are; the tasks still
  // out are cancelled and their late results are stale. 0: no such rule.
  uint32_t close_done = 0;
  Duration close_after{0};
  uint32_t close_min = 1;
  bool ClosesEarly() const { return close_done > 0 || close_after.count() > 0; }

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
  std::string output;  // the canonical output, set when done
  uint64_t runtime_us = 0;
  uint32_t target = 1;  // results to gather (replication, raised on disagreement)
};

// One replica's result, kept until its task is settled by a vote.
// kUnverified: accepted alone from a trusted agent (adaptive replication);
// it becomes kVouched when that agent next passes a spot check, or kRevoked
// (and its task runs again) when it fails one.
enum class Verdict : uint8_t {
  kPending = 0,
  kValid = 1,
  kInvalid = 2,
  kUnverified = 3,
  kVouched = 4,
  kRevoked = 5,
};
struct ReplicaRecord {
  JobId job;
  uint32_t index = 0;
  AgentId agent;
  std::string output;
  uint64_t runtime_us = 0;
  Verdict verdict = Verdict::kPending;
  LeaseId lease = 0;  // the lease it came on: orders an agent's results in time
};

// What votes have said about an agent's results (BOINC-style error rate:
// it falls with every valid result and jumps with every invalid one).
struct Reputation {
  uint64_t valid = 0;
  uint64_t invalid = 0;
  double error_rate = 0.1;
  uint64_t streak = 0;  // valid results since the last invalid one
};

struct LeaseRecord {
  LeaseId id = 0;
  JobId job;
  uint32_t index = 0;
  AgentId agent;
  Time deadline;
};

// A person or service that submits jobs. Only the token's hash is kept.
struct UserRecord {
  std::string name;
  std::string tier;  // free, researcher, professional, enterprise; admin for the operator
  std::string token_hash;
  Time created;
};

struct AgentRecord {
  AgentId id;
  std::string public_key;
  std::string device_json;
  Time enrolled;
  Reputation reputation;
  // The user whose enrollment token enrolled it; empty when unknown (tokens
  // from the operator's enroll-tokens file).
  std::string owner;
};

// One finished round of a training job (src/rounds/): the model it made
// and what made it. Round 0 holds the initial model.
struct RoundRecord {
  JobId job;
  uint32_t round = 0;
  std::string model;     // blob hashes; empty where there is none
  std::string state;     // the outer optimizer's
  std::string residual;  // the update's error feedback
  std::string update;    // compressed: model = previous model + update
  std::string info_json; // who reported, what was refused, metrics
  Time finished;
};

// One entry of the open ledger (src/ledger/): its place in the log and its
// bytes (canonical JSON), which the log's Merkle tree hashes.
struct LedgerEntry {
  uint64_t index = 0;
  std::string data;
};

// Credit an agent earned on one UTC day (day 0: 1970-01-01).
struct CreditDay {
  int64_t day = 0;
  std::string agent;
  std::string owner;
  double credit = 0;
};

// The network at one moment, as the dashboard charts it over time.
struct HistorySample {
  Time t;
  uint32_t working = 0, idle = 0, owner_busy = 0, paused = 0, offline = 0;  // devices
  double flops = 0;        // FLOP/s of the devices connected and not held back by their owners
  double tasks_per_s = 0;  // results accepted per second since the sample before
  uint64_t queue = 0;      // task replicas waiting for a device
};

// Where a user is told about their jobs and devices (coordinator/notifier.h):
// kind "webhook" (Standard Webhooks, signed with `secret`) or "slack" (an
// incoming webhook URL).
struct NotifyTarget {
  int64_t id = 0;
  std::string user;
  std::string kind;
  std::string url;
  std::string secret;  // "whsec_" + base64, for webhooks
  Time created;
};

// A user may read this blob: they uploaded it, or a job of theirs made it.
struct BlobOwner {
  std::string hash;
  std::string user;
  bool operator==(const BlobOwner&) const = default;
};

}  // namespace claw

// The agent's private message types, shared by the files that define
// Agent (agent.cc: the session loop; agent_transfers.cc: blob transfers).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "agent/agent.h"
#include "claw.grpc.pb.h"

namespace claw {

// A report waiting for the coordinator's acknowledgement.
struct Agent::Report {
  enum class Kind { kResult, kFailure, kReturned } kind;
  std::string output_or_reason;
  uint64_t runtime_us = 0;
};

struct Agent::Event {
  // kStaged: `tasks` have their inputs (`failures`: leases whose inputs
  // could not be had, with why). kUploaded: `outcome`'s files are uploaded
  // (or it was turned into a failure).
  enum class Kind { kMessage, kOutcome, kStreamEnded, kWake, kStaged, kUploaded } kind;
  v1::CoordinatorMessage msg;
  TaskOutcome outcome;
  std::vector<v1::WorkerTask> tasks = {};
  std::vector<std::pair<uint64_t, std::string>> failures = {};
};

}  // namespace claw

// The scheduler's private state (scheduler.h declares these structs; this
// defines them), shared by its two source files: scheduler.cc (jobs,
// leases, dispatch) and scheduler_votes.cc (replication, voting, trust).
// Included by nothing else.
#pragma once

#include <deque>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/scheduler.h"

namespace claw {

struct Scheduler::ReplicaResult {
  Agent* agent = nullptr;
  std::string output;
  uint64_t runtime_us = 0;
  LeaseId lease = 0;  // leases are issued in order: this dates the answer
};

struct Scheduler::Task {
  std::string params;
  std::string output;  // canonical, once done
  double cost_flop = 0;
  TaskState state = TaskState::kPending;
  uint32_t attempts = 0;
  uint64_t runtime_us = 0;             // summed over the replicas, once done
  std::string last_error;
  uint32_t target = 1;                 // results to gather
  uint32_t queued = 0;                 // entries in the job's pending queue
  std::vector<LeaseId> leases;         // active replicas
  std::vector<ReplicaResult> results;  // answers not yet settled by a vote
  Agent* unchecked_by = nullptr;       // done on this agent's word alone
  LeaseId unchecked_lease = 0;         // ... given on this lease
};

// Done, failed, or cancelled when its job closed early: nothing more runs.
inline bool Settled(TaskState s) {
  return s == TaskState::kDone || s == TaskState::kFailed || s == TaskState::kCancelled;
}

struct Scheduler::Job {
  JobRecord record;
  JobSpec spec;
  const App* app = nullptr;
  std::vector<std::string> needs;  // apps an agent must run to take its tasks
  std::vector<Task> tasks;  // emptied once the job ends
  std::deque<uint32_t> pending;
  uint32_t done = 0;
  uint32_t leased = 0;
  uint32_t failed = 0;
  uint32_t cancelled = 0;  // when it closed early
  bool closed = false;     // closed early: what is still out was cancelled
  uint64_t seq = 0;
  bool runnable = false;
  std::unordered_set<LeaseId> leases;
};

struct Scheduler::Lease {
  Job* job = nullptr;
  uint32_t index = 0;
  Agent* agent = nullptr;
  Time deadline;
  Time last_deadline;   // renewals never take `deadline` past this (the job's task_timeout)
  double estimate = 0;  // the task's run time on its agent by its cost and the agent's FLOPS
  double seconds = 0;   // the same, corrected by what the app's tasks really took
  bool started = false;  // its agent has said a worker runs it (last_deadline counts from then)
  Time granted;
};

struct Scheduler::Agent {
  AgentId id;
  std::string owner;  // empty: unknown (then only the agent itself counts)
  uint32_t slots = 1;
  double held_seconds = 0;  // estimated run time of the tasks it holds
  std::vector<std::string> apps;  // what it can run; empty: all
  bool connected = false;
  uint32_t demand = 0;
  double flops = 0;
  Time disconnected_at;
  std::unordered_set<LeaseId> leases;
  Reputation reputation;
  // Results accepted on its word alone in jobs not yet merged, oldest
  // first: vouched for by a later check or not, all of them go back to a
  // vote if the agent fails a check (a caught liar leaves nothing behind).
  struct Unchecked {
    JobId job;
    uint32_t index;
    LeaseId lease;
    bool vouched = false;
  };
  std::vector<Unchecked> unchecked;
};

}  // namespace claw

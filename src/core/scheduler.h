// Scheduler: the coordinator's state machine for jobs, tasks, leases and
// agents. Pure logic: no I/O, no threads, no clock of its own — every call is
// given `now`, and its effects come back as values:
//
//   * a StoreBatch (TakeBatch) that the caller must commit durably before it
//     tells any agent or client about the change, and
//   * Notices (TakeNotices): lease cancellations to send and jobs whose
//     progress changed.
//
// Adaptive replication: a trusted agent may run a task alone; that result is
// accepted unchecked and vouched for (or revoked) by the agent's next vote.
// A job is not merged while it holds unchecked results: one of each such
// agent's is then put to a vote (a spot check), and the job ends with every
// result checked, directly or through its agent.
//
// Task life (each task wants `target` replicas, each on a different agent):
//
//   pending --lease--> leased --result--> vote: `quorum` equivalent results?
//      ^                 |                  yes: done (canonical result; the
//      |                 |                       other leases are cancelled)
//      |                 |                  no, all in: one more replica, up to
//      |                 |                       max_replicas, then failed
//      |                 \--failure/expiry (attempts < max)--> pending
//      |                 \--agent lost, returned--> pending (no attempt counted)
//      '-- attempts exhausted: task failed, job failed
//
// A result counts only if it arrives on an active lease from the agent
// holding it; anything else is reported as stale and changes nothing, so
// duplicate reports after a reconnect are harmless. Votes move agents'
// reputations: each result that agrees with the canonical one is valid, each
// that does not is invalid.
//
// Not thread-safe: one owner (the coordinator, under its mutex) drives it.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/histogram.h"
#include "common/status.h"
#include "core/app.h"
#include "core/credits.h"
#include "core/job_spec.h"
#include "core/quota.h"
#include "core/types.h"

namespace claw {

struct SchedulerOptions {
  // Shortest lease granted; covers queueing on the agent and transport.
  Duration min_lease = std::chrono::seconds(30);
  // Lease length = max(min_lease, slack * task cost / device FLOPS, the
  // task's own time limit (App::TaskSeconds)), capped by the job's
  // task_timeout. A running task's agent renews it (RenewLeases) up to that
  // cap, counted from the task's start once the agent has reported it.
  double lease_slack = 4.0;
  // How long the leases of an agent whose session dropped are kept for it to
  // reconnect and claim them before they are re-issued to others.
  Duration session_grace = std::chrono::seconds(15);
  // FLOPS assumed for an agent that reported none.
  double default_flops = 1e9;
  // Most outstanding slots one agent may ask for.
  uint32_t max_demand = 4096;
  // Reputation: the error rate is multiplied by this for each valid result
  // and raised by `error_step` (up to 1) for each invalid one.
  double error_decay = 0.95;
  double error_step = 0.1;
  // An agent at or above this error rate is on probation: it still gets
  // work (and can earn its way back), but its answers do not use up a task's
  // max_replicas, so known liars cannot make honest work fail. A task stops
  // at twice max_replicas answers in all.
  double probation_error_rate = 0.3;
  // Adaptive replication: an agent with at least `trust_streak` valid results
  // in a row and an error rate under `trust_error_rate` runs a task of an
  // adaptive job alone, except for the job's `spot_check` share of them,
  // which are replicated anyway. Each spot check it passes vouches for its
  // unchecked results before it; one it fails sends back to a vote all it
  // gave unchecked in jobs not yet merged.
  uint64_t trust_streak = 10;
  double trust_error_rate = 0.05;
  uint64_t seed = 1;  // for the spot-check draws
  // Replicas of one task go to agents of different owners (where known), so
  // that one person's machines cannot outvote the rest.
  bool distinct_owners = true;
  // An agent gets tasks beyond one per slot only while the estimated run
  // time of what it holds is under this many seconds per slot (BOINC's work
  // buffer); estimates are corrected by the app's observed run times. Agents size their requests by the task times they saw last,
  // which say nothing about the next job: without this, the first agent to
  // ask after a run of instant tasks would take every long task there is.
  double work_buffer_seconds = 1.0;
  // What a validated result earns (core/credits.h).
  CreditOptions credit;
  // Fair share between users: jobs of the user whose recent use of the
  // network, divided by their weight (SetOwnerWeight: a tier's), is least
  // go first; use is the estimated run time of what was dispatched,
  // decaying with this half-life.
  Duration fair_share_half_life = std::chrono::hours(6);
  // Credit grants, usage charges and fair share's accounting; off only to
  // measure what they cost (network_bench books).
  bool keep_books = true;
};

// ---- effects -------------------------------------------------------------

struct TaskUpdate {
  JobId job;
  uint32_t index = 0;
  TaskState state = TaskState::kPending;
  uint32_t attempts = 0;
  std::string output;
  uint64_t runtime_us = 0;
  uint32_t target = 1;
};

struct VerdictUpdate {
  JobId job;
  uint32_t index = 0;
  AgentId agent;
  Verdict verdict = Verdict::kPending;
};

struct JobUpdate {
  JobId id;
  JobState state = JobState::kRunning;
  Time finished;
  std::string result_json;
  std::string error;
  uint64_t task_runtime_us = 0;
  uint32_t n_tasks = 0;  // grows for jobs whose app adds tasks (App::Expand)
};

struct NewJob {
  JobRecord job;
  std::vector<TaskRecord> tasks;
};

// Everything one or more scheduler calls changed, for one store transaction.
struct StoreBatch {
  std::vector<NewJob> new_jobs;
  std::vector<LeaseRecord> leases_granted;
  std::vector<LeaseId> leases_ended;
  std::vector<TaskUpdate> task_updates;
  std::vector<TaskRecord> tasks_added;  // to running jobs (App::Expand)
  std::vector<JobUpdate> job_updates;
  std::vector<ReplicaRecord> replicas_added;  // results waiting for a vote
  std::vector<VerdictUpdate> verdicts;        // after the vote
  std::map<AgentId, Reputation> reputations;  // latest value per agent
  std::vector<BlobOwner> blob_owners;         // output blobs of merged jobs
  std::vector<CreditGrant> credits;           // validated (or revoked) results' credit
  std::vector<UsageCharge> usage;             // run time of settled tasks, by owner
  LeaseId next_lease_id = 0;                  // 0: unchanged
  // Filled in by the coordinator from `credits`: the accounts they changed
  // (CreditBook) and their entries in the open ledger.
  CreditChanges credit_changes;
  std::vector<LedgerEntry> ledger;
  // The month (core/quota.h) that `usage` is added to.
  int32_t usage_month = 0;

  bool empty() const {
    return new_jobs.empty() && leases_granted.empty() && leases_ended.empty() &&
           task_updates.empty() && tasks_added.empty() && job_updates.empty() &&
           replicas_added.empty() &&
           verdicts.empty() && reputations.empty() && blob_owners.empty() && credits.empty() &&
           usage.empty() && credit_changes.empty() && ledger.empty() && next_lease_id == 0;
  }
};

struct Notices {
  std::unordered_map<AgentId, std::vector<LeaseId>> cancels;
  std::set<JobId> jobs_changed;
};

// What the store hands back after a restart.
struct RecoveredState {
  std::vector<JobRecord> jobs;      // every job
  std::vector<TaskRecord> tasks;    // the tasks of running jobs
  std::vector<LeaseRecord> leases;  // active leases
  // Results awaiting a vote (running jobs), results accepted unchecked
  // (kUnverified, any job) and those a later check vouched for (kVouched,
  // running jobs: a failed check still sends them back to a vote).
  std::vector<ReplicaRecord> replicas;
  std::map<AgentId, Reputation> reputations;
  LeaseId next_lease_id = 1;
};

struct Assignment {
  LeaseId lease = 0;
  JobId job;
  uint32_t index = 0;
  std::string app;
  std::string params;
  Time deadline;
};

struct AgentAssignments {
  AgentId agent;
  std::vector<Assignment> assignments;
};

struct ResultIn {
  LeaseId lease = 0;
  std::string output;
  uint64_t runtime_us = 0;
};

enum class ResultOutcome { kAccepted, kStale, kNotYours };

struct JobView {
  JobRecord record;
  uint32_t done = 0;
  uint32_t leased = 0;
  uint32_t failed = 0;
  // Why a running job makes no progress, when the scheduler can tell:
  // no connected agent runs its app, or a task's answers disagree and no
  // agent that may break the tie is connected. Empty otherwise.
  std::string waiting;
};

// ---- the scheduler ---------------------------------------------------------

class Scheduler {
 public:
  Scheduler(const AppRegistry* apps, SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Rebuilds state from the store. Call once, before anything else. Leases
  // are kept for their agents for `session_grace`.
  Status Restore(RecoveredState state, Time now);

  // Admits a planned job under a fresh id. AlreadyExists if the id is taken.
  Status AddJob(const JobId& id, const std::string& owner, PlannedJob job, Time now);
  // FailedPrecondition if the job already ended; NotFound if unknown.
  Status CancelJob(const JobId& id, Time now);
  // Ends a driven job (App::Driven) as its driver decided. FailedPrecondition
  // if it already ended or is not driven; NotFound if unknown.
  Status EndJob(const JobId& id, JobState state, std::string result_json, std::string error,
                Time now);

  // An agent's session opened. `held` lists the leases it still runs or has
  // results for; its other leases are re-issued. Returns held leases that are
  // no longer valid, which the agent should drop.
  std::vector<LeaseId> AgentConnected(const AgentId& agent, double flops,
                                      const std::vector<LeaseId>& held, Time now);
  void AgentDisconnected(const AgentId& agent, Time now);
  // Whose device the agent is (empty: unknown). With distinct_owners, two
  // replicas of a task never go to agents of one owner.
  void SetAgentOwner(const AgentId& agent, const std::string& owner);
  // How many tasks the agent runs at once (its worker processes).
  void SetAgentSlots(const AgentId& agent, uint32_t slots);
  // The apps the agent can run (empty: all); it gets tasks only of jobs
  // whose App::Needs it has.
  void SetAgentApps(const AgentId& agent, std::vector<std::string> apps);
  // The app of the lease's task; nullptr for an unknown (ended) lease or
  // one that another agent holds.
  const App* AppOfLease(LeaseId lease, const AgentId& holder) const;
  // The params of the lease's task; empty for an unknown (ended) lease or
  // one that another agent holds.
  std::string ParamsOfLease(LeaseId lease, const AgentId& holder) const;
  // Whether `fn(app, task_params)` holds for a task the agent now has an
  // active lease on (what an agent may fetch is decided by this).
  bool AnyLeasedTask(const AgentId& agent,
                     const std::function<bool(const App&, std::string_view)>& fn) const;
  // The agent can take `slots` more tasks.
  void AddDemand(const AgentId& agent, uint32_t slots);

  // The agent takes nothing more until it asks again.
  void WithdrawDemand(const AgentId& agent);

  // Matches outstanding demand with pending tasks, granting leases: jobs of
  // held users wait; among the others, fair share between users, then
  // priority, then submission order.
  std::vector<AgentAssignments> Dispatch(Time now);

  // ---- users (core/quota.h) ----
  // The user's weight in fair share (1 until set).
  void SetOwnerWeight(const std::string& owner, double weight);
  // Holds every job of `owner`: nothing of theirs is dispatched, and they
  // say `reason` as why they wait; an empty reason releases them.
  void HoldOwner(const std::string& owner, std::string reason);

  std::vector<ResultOutcome> AcceptResults(const AgentId& agent, std::vector<ResultIn>& results,
                                           Time now);
  // A task failed on the agent. Returns false if the lease was not the agent's.
  bool TaskFailed(const AgentId& agent, LeaseId lease, const std::string& reason, Time now);
  // The agent's result failed the app's check (App::CheckOutput): the task
  // failed, and the agent's reputation counts a wrong answer. Returns false
  // if the lease was not the agent's.
  bool ResultRejected(const AgentId& agent, LeaseId lease, const std::string& reason, Time now);
  // A result accepted earlier proved wrong later (a training delta that an
  // aggregation rule refused): the agent's reputation counts a wrong answer.
  void CountWrongAnswer(const AgentId& agent, Time now);
  // The agent's session says it still holds these tasks: their leases last
  // another min_lease from now, but never past the job's task_timeout from
  // their grant or, for those also in `started` (a worker runs them now),
  // from the first time they were reported started. Leases not the agent's
  // are ignored. Returns how many were extended. (Renewals are not stored;
  // Restore gives every lease time for its agent to come back and renew it.)
  size_t RenewLeases(const AgentId& agent, const std::vector<LeaseId>& running,
                     const std::vector<LeaseId>& started, Time now);
  // The agent hands a lease back unrun; no attempt is counted.
  bool LeaseReturned(const AgentId& agent, LeaseId lease, Time now);

  // Expires leases past their deadline and re-issues the leases of agents
  // gone longer than the grace period.
  void Tick(Time now);
  // The earliest time at which Tick has something to do, if any.
  std::optional<Time> NextWakeup() const;

  std::optional<JobView> GetJob(const JobId& id) const;
  // The running jobs whose ids begin with `prefix` (a training job's rounds).
  std::vector<JobId> RunningJobsUnder(std::string_view prefix) const;
  // What votes have said about the agent (a fresh record if nothing yet).
  Reputation ReputationOf(const AgentId& agent) const;
  // Most recent first.
  std::vector<JobView> ListJobs(size_t limit) const;

  StoreBatch TakeBatch();
  Notices TakeNotices();

  // Counters for /metrics and tests.
  struct Histograms {
    Histogram task_run{Histogram::SecondsBounds()};    // run time workers reported
    Histogram queue_wait{Histogram::SecondsBounds()};  // submission to a task's first lease
    Histogram round_trip{Histogram::SecondsBounds()};  // lease granted to result in
  };
  const Histograms& histograms() const { return histograms_; }
  struct AgentCounts {
    size_t working = 0;  // connected, holding tasks
    size_t idle = 0;     // connected, holding none
  };
  AgentCounts CountAgents() const;
  // One agent as the dashboard shows it: what it holds and, when it holds
  // nothing while connected and asking, why no task goes to it.
  struct AgentWork {
    bool known = false;
    bool connected = false;
    uint32_t demand = 0;       // slots it asked for and has not been sent
    size_t leases = 0;         // tasks it holds now
    std::vector<JobId> jobs;   // of those tasks (distinct, at most 8)
    std::string why_no_work;   // empty: it holds work, or would get it at the next dispatch
  };
  // `explain`: fill why_no_work (looks at up to 200 queued jobs).
  AgentWork WorkOf(const AgentId& agent, bool explain = true) const;
  size_t running_jobs() const;
  size_t pending_tasks() const { return pending_total_; }
  size_t active_leases() const { return leases_.size(); }
  size_t connected_agents() const;
  size_t job_count() const { return job_order_.size(); }

 private:
  struct Task;
  struct ReplicaResult;
  struct Job;
  struct Lease;
  struct Agent;
  struct RunKey {
    int32_t neg_priority;
    uint64_t seq;
    Job* job;
    bool operator<(const RunKey& o) const {
      return std::tie(neg_priority, seq) < std::tie(o.neg_priority, o.seq);
    }
  };

  struct OwnerShare {
    double weight = 1;
    double usage = 0;  // decayed estimated seconds dispatched
    Time usage_at;
    std::string held;  // why the owner's jobs wait; empty: not held
  };
  // Puts the jobs in fair-share order (stable: priority and submission
  // order within a user), leaving out those of held users.
  void ShareOut(std::vector<Job*>& jobs, Time now);
  double ShareKey(OwnerShare& share, Time now) const;

  Agent& AgentFor(const AgentId& id);
  Job* FindJob(const JobId& id) const;
  LeaseId Grant(Job& job, uint32_t index, Agent& agent, Time now, Assignment* out);
  // Ends a lease: forgets it and persists its removal. Returns the lease.
  Lease EndLease(LeaseId id);
  // Queues `n` more replicas of the task (at the front: they hold the tail).
  void Requeue(Job& job, uint32_t index, uint32_t n = 1);
  void MarkRunnable(Job& job);
  // Grants up to `n` of the job's pending replicas to `agent`, skipping tasks
  // the agent already runs or has answered. Returns how many it granted.
  uint32_t TakeFrom(Job& job, Agent& agent, uint32_t n, Time now, std::vector<Assignment>* out);
  bool Involves(const Task& task, const Agent& agent) const;
  // The agent runs every app the job needs (or did not say what it runs).
  bool RunsNeeds(const Agent& agent, const Job& job) const;
  // Whether a connected agent could take another replica of the task.
  bool AnyAgentCouldTake(const Job& job, const Task& task) const;
  // Fails tasks whose disagreeing answers have waited longer than their
  // job's quorum_wait for an agent that may break the tie (checked about
  // once a second).
  void CheckTieWaits(Time now);
  std::string WaitingReason(const Job& job) const;
  // What two of the task's disagreeing answers differ in (App::Difference).
  std::string Disagreement(const Job& job, const Task& task) const;
  // Fails the task and its job: its answers reached no quorum (`why`).
  void FailForNoQuorum(Job& job, uint32_t index, const std::string& why, Time now);
  void AddResult(Job& job, uint32_t index, Agent& agent, ResultIn& result, Time now);
  // How long an app's tasks really take against their estimate (cost /
  // FLOPS), learned from reported run times (BOINC's duration correction
  // factor); 1 until known.
  double SpeedFactor(const App* app) const;
  void LearnSpeed(const App* app, double seconds, double estimate);
  // Settles the task if `quorum` results agree; otherwise asks for more or fails it.
  void Vote(Job& job, uint32_t index, Time now);
  void Settle(Job& job, uint32_t index, size_t canonical, Time now);
  // Lets a growing job's app add tasks after task `settled` settled.
  void Grow(Job& job, uint32_t settled);
  // Counts a vote on the agent's answer given on `lease`.
  void Judge(Agent& agent, bool valid, LeaseId lease, Time now);
  // Merges the job once every task is settled and no result in it waits for
  // its agent's next spot check; asks for those checks when only they remain.
  void MaybeFinish(Job& job, Time now);
  bool Trusted(const Agent& agent) const;
  // Sets how many results the task needs for an agent about to run its
  // first replica: 1 for a trusted agent (unless spot-checked), else the
  // job's replication.
  void DecideReplication(Job& job, uint32_t index, const Agent& agent);
  // Puts a done task back to pending (a revoked result of `agent`'s, which
  // gives back the credit it earned).
  void Unsettle(Job& job, uint32_t index, const Agent& agent);
  // Grants each of the results that count the lowest of their claims
  // (core/credits.h). `earners`: (agent, run time) of each.
  void GrantCredit(const Job& job, uint32_t index,
                   std::span<const std::pair<Agent*, uint64_t>> earners);
  void AddGrant(const Job& job, uint32_t index, const Agent& agent, double credit,
                uint64_t runtime_us);
  // What one of the agent's results claims, in credits.
  double Claim(const Task& task, const Agent& agent, uint64_t runtime_us) const;
  void MergeJob(Job& job, Time now);
  // Whether a job that closes early (JobSpec::close_done, close_after) has
  // what it needs to close now.
  bool ShouldClose(const Job& job, Time now) const;
  // Cancels what is still out of the job; MaybeFinish then merges it.
  void Close(Job& job, Time now);
  void FailTask(Job& job, uint32_t index, const std::string& reason, Time now);
  // For a job that closes early with enough tasks left that may still be
  // done: the task fails alone (its replicas stop) and the job goes on.
  // False, changing nothing, for any other job.
  bool LeaveOut(Job& job, uint32_t index, Time now);
  void FinishJob(Job& job, JobState state, std::string result_json, std::string error, Time now);
  void StopAllLeases(Job& job);
  void RecordTask(const Job& job, uint32_t index);
  JobView ViewOf(const Job& job) const;

  const AppRegistry* apps_;
  SchedulerOptions options_;
  std::unordered_map<const App*, double> speed_;  // SpeedFactor, per app
  std::unordered_map<JobId, std::unique_ptr<Job>> jobs_;
  std::vector<Job*> job_order_;  // creation order
  std::set<RunKey> runnable_;    // jobs with pending tasks
  std::unordered_map<std::string, OwnerShare> owners_;
  size_t held_owners_ = 0;
  // The owner of the last lease granted, and their share: most grants in a
  // dispatch are one job's.
  std::string last_owner_;
  OwnerShare* last_share_ = nullptr;
  Histograms histograms_;
  std::unordered_map<LeaseId, Lease> leases_;
  std::set<std::pair<Time, LeaseId>> deadlines_;
  std::unordered_map<AgentId, std::unique_ptr<Agent>> agents_;
  struct ById {
    bool operator()(const Agent* a, const Agent* b) const;
  };
  std::set<Agent*, ById> wanting_;  // connected agents with demand > 0, in id order
  std::set<std::pair<Time, Agent*>> orphans_;
  std::set<std::pair<Time, Job*>> close_times_;  // running jobs with a close_after  // disconnected agents holding leases
  // Tasks whose answers disagree, waiting for a tie-breaker, with when an
  // agent that could break the tie was last connected.
  std::map<std::pair<JobId, uint32_t>, Time> tie_waits_;
  Time next_tie_check_;
  LeaseId next_lease_id_ = 1;
  uint64_t next_seq_ = 1;
  std::mt19937_64 rng_;
  size_t pending_total_ = 0;
  StoreBatch batch_;
  Notices notices_;
};

}  // namespace claw

#include "core/scheduler.h"

#include <algorithm>
#include <cmath>

namespace claw {

struct Scheduler::Task {
  std::string params;
  std::string output;
  double cost_flop = 0;
  TaskState state = TaskState::kPending;
  uint32_t attempts = 0;
  uint64_t runtime_us = 0;
  std::string last_error;
};

struct Scheduler::Job {
  JobRecord record;
  JobSpec spec;
  const App* app = nullptr;
  std::vector<Task> tasks;  // emptied once the job ends
  std::deque<uint32_t> pending;
  uint32_t done = 0;
  uint32_t leased = 0;
  uint32_t failed = 0;
  uint64_t seq = 0;
  bool runnable = false;
  std::unordered_set<LeaseId> leases;
};

struct Scheduler::Lease {
  Job* job = nullptr;
  uint32_t index = 0;
  Agent* agent = nullptr;
  Time deadline;
};

struct Scheduler::Agent {
  AgentId id;
  bool connected = false;
  uint32_t demand = 0;
  double flops = 0;
  Time disconnected_at;
  std::unordered_set<LeaseId> leases;
};

bool Scheduler::ById::operator()(const Agent* a, const Agent* b) const { return a->id < b->id; }

Scheduler::Scheduler(const AppRegistry* apps, SchedulerOptions options)
    : apps_(apps), options_(options) {}

Scheduler::~Scheduler() = default;

Scheduler::Agent& Scheduler::AgentFor(const AgentId& id) {
  auto& slot = agents_[id];
  if (!slot) {
    slot = std::make_unique<Agent>();
    slot->id = id;
    slot->flops = options_.default_flops;
  }
  return *slot;
}

Scheduler::Job* Scheduler::FindJob(const JobId& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

// ---- restore ----------------------------------------------------------------

Status Scheduler::Restore(RecoveredState state, Time now) {
  next_lease_id_ = std::max<LeaseId>(state.next_lease_id, 1);
  std::sort(state.jobs.begin(), state.jobs.end(),
            [](const JobRecord& a, const JobRecord& b) { return a.created < b.created; });
  for (auto& rec : state.jobs) {
    auto job = std::make_unique<Job>();
    job->seq = next_seq_++;
    if (rec.state == JobState::kRunning) {
      auto spec = ParseJobSpec(rec.spec_json, *apps_);
      if (!spec.ok()) {
        return Internal("stored job " + rec.id + " has an unreadable spec: " +
                        spec.status().message());
      }
      job->spec = std::move(spec).value();
      job->app = apps_->Find(job->spec.app);
      job->tasks.resize(rec.n_tasks);
      rec.task_runtime_us = 0;  // summed again from the stored tasks below
    }
    job->record = std::move(rec);
    job_order_.push_back(job.get());
    JobId id = job->record.id;
    jobs_.emplace(std::move(id), std::move(job));
  }
  for (auto& t : state.tasks) {
    Job* job = FindJob(t.job);
    if (!job || t.index >= job->tasks.size()) {
      return Internal("stored task " + t.job + "/" + std::to_string(t.index) + " has no job");
    }
    Task& task = job->tasks[t.index];
    task.params = std::move(t.params);
    task.cost_flop = t.cost_flop;
    task.state = t.state;
    task.attempts = t.attempts;
    task.output = std::move(t.output);
    task.runtime_us = t.runtime_us;
    if (task.state == TaskState::kDone) {
      job->done++;
      job->record.task_runtime_us += task.runtime_us;
    }
    if (task.state == TaskState::kFailed) job->failed++;
  }
  for (auto& l : state.leases) {
    Job* job = FindJob(l.job);
    if (!job || l.index >= job->tasks.size() || job->record.state != JobState::kRunning) {
      continue;  // a lease of an ended job: nothing to re-issue
    }
    Task& task = job->tasks[l.index];
    if (task.state != TaskState::kPending) continue;
    task.state = TaskState::kLeased;
    job->leased++;
    job->leases.insert(l.id);
    Agent& agent = AgentFor(l.agent);
    agent.disconnected_at = now;
    agent.leases.insert(l.id);
    leases_[l.id] = Lease{job, l.index, &agent, l.deadline};
    deadlines_.emplace(l.deadline, l.id);
    next_lease_id_ = std::max(next_lease_id_, l.id + 1);
  }
  for (auto& [id, agent] : agents_) {
    if (!agent->leases.empty()) orphans_.emplace(agent->disconnected_at, agent.get());
  }
  for (Job* job : job_order_) {
    if (job->record.state != JobState::kRunning) continue;
    for (uint32_t i = 0; i < job->tasks.size(); ++i) {
      if (job->tasks[i].state == TaskState::kPending) {
        job->pending.push_back(i);
        pending_total_++;
      }
    }
    MarkRunnable(*job);
    if (job->done == job->tasks.size()) MergeJob(*job, now);  // crashed before the merge
  }
  return Status::Ok();
}

// ---- jobs ---------------------------------------------------------------------

Status Scheduler::AddJob(const JobId& id, const std::string& owner, PlannedJob planned, Time now) {
  if (jobs_.count(id)) return {StatusCode::kAlreadyExists, "job " + id + " already exists"};
  auto job = std::make_unique<Job>();
  job->seq = next_seq_++;
  job->app = apps_->Find(planned.spec.app);
  if (!job->app) return InvalidArgument("spec.app: unknown app '" + planned.spec.app + "'");
  job->record.id = id;
  job->record.owner = owner;
  job->record.spec_json = planned.spec.ToJson().dump();
  job->record.state = JobState::kRunning;
  job->record.created = now;
  job->record.n_tasks = static_cast<uint32_t>(planned.tasks.size());
  job->spec = std::move(planned.spec);

  NewJob persisted;
  persisted.job = job->record;
  persisted.tasks.reserve(planned.tasks.size());
  job->tasks.resize(planned.tasks.size());
  for (uint32_t i = 0; i < planned.tasks.size(); ++i) {
    TaskSpec& ts = planned.tasks[i];
    persisted.tasks.push_back(TaskRecord{id, i, ts.params, ts.cost_flop});
    job->tasks[i].params = std::move(ts.params);
    job->tasks[i].cost_flop = ts.cost_flop;
    job->pending.push_back(i);
  }
  pending_total_ += job->pending.size();
  batch_.new_jobs.push_back(std::move(persisted));
  notices_.jobs_changed.insert(id);
  Job* raw = job.get();
  job_order_.push_back(raw);
  jobs_.emplace(id, std::move(job));
  MarkRunnable(*raw);
  return Status::Ok();
}

Status Scheduler::CancelJob(const JobId& id, Time now) {
  Job* job = FindJob(id);
  if (!job) return NotFound("no job " + id);
  if (IsFinal(job->record.state)) {
    return FailedPrecondition("job " + id + " has already ended (" +
                              JobStateName(job->record.state) + ")");
  }
  FinishJob(*job, JobState::kCancelled, "", "cancelled by request", now);
  return Status::Ok();
}

void Scheduler::MarkRunnable(Job& job) {
  bool should = job.record.state == JobState::kRunning && !job.pending.empty();
  RunKey key{-job.spec.priority, job.seq, &job};
  if (should && !job.runnable) runnable_.insert(key);
  if (!should && job.runnable) runnable_.erase(key);
  job.runnable = should;
}

void Scheduler::Requeue(Job& job, uint32_t index) {
  job.tasks[index].state = TaskState::kPending;
  job.pending.push_front(index);  // re-issued work goes first: it holds the job's tail
  pending_total_++;
  MarkRunnable(job);
}

void Scheduler::RecordTask(const Job& job, uint32_t index) {
  const Task& t = job.tasks[index];
  batch_.task_updates.push_back(
      TaskUpdate{job.record.id, index, t.state, t.attempts, t.output, t.runtime_us});
}

void Scheduler::StopAllLeases(Job& job) {
  std::vector<LeaseId> ids(job.leases.begin(), job.leases.end());
  for (LeaseId id : ids) {
    Lease l = EndLease(id);
    if (l.agent->connected) notices_.cancels[l.agent->id].push_back(id);
  }
}

void Scheduler::FinishJob(Job& job, JobState state, std::string result_json, std::string error,
                          Time now) {
  StopAllLeases(job);
  pending_total_ -= job.pending.size();
  job.pending.clear();
  job.record.state = state;
  job.record.finished = now;
  job.record.result_json = std::move(result_json);
  job.record.error = std::move(error);
  MarkRunnable(job);
  batch_.job_updates.push_back(
      JobUpdate{job.record.id, state, now, job.record.result_json, job.record.error,
                job.record.task_runtime_us});
  notices_.jobs_changed.insert(job.record.id);
  // The results live in the store now; keep only the record in memory.
  std::vector<Task>().swap(job.tasks);
}

// ---- agents ---------------------------------------------------------------------

std::vector<LeaseId> Scheduler::AgentConnected(const AgentId& id, double flops,
                                               const std::vector<LeaseId>& held, Time now) {
  Agent& agent = AgentFor(id);
  orphans_.erase({agent.disconnected_at, &agent});
  agent.connected = true;
  agent.demand = 0;
  if (flops > 0) agent.flops = flops;
  std::unordered_set<LeaseId> held_set(held.begin(), held.end());
  std::vector<LeaseId> invalid;
  for (LeaseId l : held) {
    if (!agent.leases.count(l)) invalid.push_back(l);
  }
  std::vector<LeaseId> lost;
  for (LeaseId l : agent.leases) {
    if (!held_set.count(l)) lost.push_back(l);
  }
  for (LeaseId l : lost) {
    Lease lease = EndLease(l);
    Requeue(*lease.job, lease.index);
  }
  (void)now;
  return invalid;
}

void Scheduler::AgentDisconnected(const AgentId& id, Time now) {
  auto it = agents_.find(id);
  if (it == agents_.end()) return;
  Agent& agent = *it->second;
  agent.connected = false;
  agent.demand = 0;
  wanting_.erase(&agent);
  agent.disconnected_at = now;
  if (!agent.leases.empty()) orphans_.emplace(now, &agent);
}

void Scheduler::AddDemand(const AgentId& id, uint32_t slots) {
  auto it = agents_.find(id);
  if (it == agents_.end() || !it->second->connected || slots == 0) return;
  Agent& agent = *it->second;
  agent.demand = std::min(options_.max_demand, agent.demand + slots);
  wanting_.insert(&agent);
}

void Scheduler::WithdrawDemand(const AgentId& id) {
  auto it = agents_.find(id);
  if (it == agents_.end()) return;
  it->second->demand = 0;
  wanting_.erase(it->second.get());
}

size_t Scheduler::connected_agents() const {
  size_t n = 0;
  for (const auto& [id, a] : agents_) n += a->connected ? 1 : 0;
  return n;
}

// ---- leases -----------------------------------------------------------------------

LeaseId Scheduler::Grant(Job& job, uint32_t index, Agent& agent, Time now, Assignment* out) {
  Task& task = job.tasks[index];
  LeaseId id = next_lease_id_++;
  double seconds = options_.lease_slack * task.cost_flop / std::max(agent.flops, 1.0);
  Duration length = std::max(options_.min_lease,
                             Duration(static_cast<int64_t>(std::min(seconds, 1e12) * 1e6)));
  length = std::min(length, job.spec.task_timeout);
  Time deadline = now + length;
  task.state = TaskState::kLeased;
  job.leased++;
  job.leases.insert(id);
  agent.leases.insert(id);
  leases_.emplace(id, Lease{&job, index, &agent, deadline});
  deadlines_.emplace(deadline, id);
  batch_.leases_granted.push_back(LeaseRecord{id, job.record.id, index, agent.id, deadline});
  out->lease = id;
  out->job = job.record.id;
  out->index = index;
  out->app = job.spec.app;
  out->params = task.params;
  out->deadline = deadline;
  return id;
}

Scheduler::Lease Scheduler::EndLease(LeaseId id) {
  auto it = leases_.find(id);
  Lease l = it->second;
  leases_.erase(it);
  deadlines_.erase({l.deadline, id});
  l.job->leases.erase(id);
  l.job->leased--;
  l.agent->leases.erase(id);
  if (l.agent->leases.empty()) orphans_.erase({l.agent->disconnected_at, l.agent});
  batch_.leases_ended.push_back(id);
  notices_.jobs_changed.insert(l.job->record.id);
  return l;
}

std::vector<AgentAssignments> Scheduler::Dispatch(Time now) {
  std::vector<AgentAssignments> out;
  if (wanting_.empty() || runnable_.empty()) return out;
  std::unordered_map<Agent*, size_t> slot_of;
  // Round-robin in small chunks so that one agent's large demand does not
  // starve the others when work is scarce.
  constexpr uint32_t kChunk = 32;
  while (!wanting_.empty() && !runnable_.empty()) {
    std::vector<Agent*> round(wanting_.begin(), wanting_.end());
    for (Agent* agent : round) {
      if (runnable_.empty()) break;
      auto [it, fresh] = slot_of.emplace(agent, out.size());
      if (fresh) out.push_back(AgentAssignments{agent->id, {}});
      auto& list = out[it->second].assignments;
      uint32_t take = std::min(agent->demand, kChunk);
      for (uint32_t k = 0; k < take && !runnable_.empty(); ++k) {
        Job& job = *runnable_.begin()->job;
        uint32_t index = job.pending.front();
        job.pending.pop_front();
        pending_total_--;
        list.emplace_back();
        Grant(job, index, *agent, now, &list.back());
        agent->demand--;
        MarkRunnable(job);
        notices_.jobs_changed.insert(job.record.id);
      }
      if (agent->demand == 0) wanting_.erase(agent);
    }
  }
  if (!out.empty()) batch_.next_lease_id = next_lease_id_;
  std::erase_if(out, [](const AgentAssignments& a) { return a.assignments.empty(); });
  return out;
}

// ---- results and failures ---------------------------------------------------------

std::vector<ResultOutcome> Scheduler::AcceptResults(const AgentId& agent_id,
                                                    std::vector<ResultIn>& results, Time now) {
  std::vector<ResultOutcome> outcomes;
  outcomes.reserve(results.size());
  for (ResultIn& r : results) {
    auto it = leases_.find(r.lease);
    if (it == leases_.end()) {
      outcomes.push_back(ResultOutcome::kStale);
      continue;
    }
    if (it->second.agent->id != agent_id) {
      outcomes.push_back(ResultOutcome::kNotYours);
      continue;
    }
    Lease l = EndLease(r.lease);
    CompleteTask(*l.job, l.index, r);
    if (l.job->done == l.job->tasks.size()) MergeJob(*l.job, now);
    outcomes.push_back(ResultOutcome::kAccepted);
  }
  return outcomes;
}

void Scheduler::CompleteTask(Job& job, uint32_t index, ResultIn& result) {
  Task& task = job.tasks[index];
  task.state = TaskState::kDone;
  task.output = std::move(result.output);
  task.runtime_us = result.runtime_us;
  job.record.task_runtime_us += result.runtime_us;
  job.done++;
  RecordTask(job, index);
}

// Merges in task order, so the result does not depend on the order in which
// results arrived (floating-point addition is not associative).
void Scheduler::MergeJob(Job& job, Time now) {
  std::vector<std::string_view> outputs;
  outputs.reserve(job.tasks.size());
  for (const Task& t : job.tasks) outputs.push_back(t.output);
  auto merged = job.app->Merge(job.spec, outputs);
  if (merged.ok()) {
    FinishJob(job, JobState::kDone, merged->dump(), "", now);
  } else {
    FinishJob(job, JobState::kFailed, "", "merge failed: " + merged.status().message(), now);
  }
}

bool Scheduler::TaskFailed(const AgentId& agent_id, LeaseId lease, const std::string& reason,
                           Time now) {
  auto it = leases_.find(lease);
  if (it == leases_.end() || it->second.agent->id != agent_id) return false;
  Lease l = EndLease(lease);
  FailTask(*l.job, l.index, reason, now);
  return true;
}

void Scheduler::FailTask(Job& job, uint32_t index, const std::string& reason, Time now) {
  Task& task = job.tasks[index];
  task.attempts++;
  task.last_error = reason;
  if (task.attempts < job.spec.max_attempts) {
    Requeue(job, index);
    RecordTask(job, index);
    return;
  }
  task.state = TaskState::kFailed;
  job.failed++;
  RecordTask(job, index);
  FinishJob(job, JobState::kFailed, "",
            "task " + std::to_string(index) + " failed " + std::to_string(task.attempts) +
                " times; last: " + reason,
            now);
}

bool Scheduler::LeaseReturned(const AgentId& agent_id, LeaseId lease, Time now) {
  auto it = leases_.find(lease);
  if (it == leases_.end() || it->second.agent->id != agent_id) return false;
  Lease l = EndLease(lease);
  Requeue(*l.job, l.index);
  (void)now;
  return true;
}

void Scheduler::Tick(Time now) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    LeaseId id = deadlines_.begin()->second;
    Lease l = EndLease(id);
    if (l.agent->connected) notices_.cancels[l.agent->id].push_back(id);
    FailTask(*l.job, l.index, "lease expired on agent " + l.agent->id, now);
  }
  while (!orphans_.empty() && orphans_.begin()->first + options_.session_grace <= now) {
    Agent* agent = orphans_.begin()->second;
    orphans_.erase(orphans_.begin());
    std::vector<LeaseId> ids(agent->leases.begin(), agent->leases.end());
    for (LeaseId id : ids) {
      Lease l = EndLease(id);
      Requeue(*l.job, l.index);
    }
  }
}

std::optional<Time> Scheduler::NextWakeup() const {
  std::optional<Time> t;
  if (!deadlines_.empty()) t = deadlines_.begin()->first;
  if (!orphans_.empty()) {
    Time o = orphans_.begin()->first + options_.session_grace;
    if (!t || o < *t) t = o;
  }
  return t;
}

// ---- queries ------------------------------------------------------------------------

JobView Scheduler::ViewOf(const Job& job) const {
  JobView v{job.record, job.done, job.leased, job.failed};
  if (job.record.state == JobState::kDone) v.done = job.record.n_tasks;
  return v;
}

std::optional<JobView> Scheduler::GetJob(const JobId& id) const {
  const Job* job = FindJob(id);
  if (!job) return std::nullopt;
  return ViewOf(*job);
}

std::vector<JobView> Scheduler::ListJobs(size_t limit) const {
  std::vector<JobView> out;
  for (auto it = job_order_.rbegin(); it != job_order_.rend() && out.size() < limit; ++it) {
    out.push_back(ViewOf(**it));
  }
  return out;
}

StoreBatch Scheduler::TakeBatch() { return std::exchange(batch_, StoreBatch{}); }
Notices Scheduler::TakeNotices() { return std::exchange(notices_, Notices{}); }

}  // namespace claw

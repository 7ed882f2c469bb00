// A job's life in the scheduler: restored after a restart, added, made
// runnable, grown (adaptive replication's later tasks), merged when every
// task is done, failed or cancelled, and what it looks like from outside.
// Leases and dispatch are in scheduler.cc; votes, trust and reputation in
// scheduler_votes.cc.
#include <algorithm>

#include "core/scheduler.h"
#include "core/scheduler_state.h"

namespace claw {

Status Scheduler::Restore(RecoveredState state, Time now) {
  next_lease_id_ = std::max<LeaseId>(state.next_lease_id, 1);
  for (auto& [id, rep] : state.reputations) AgentFor(id).reputation = rep;
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
      job->needs = job->app->Needs(job->spec);
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
    task.target = std::max<uint32_t>(t.target, 1);
    if (task.state == TaskState::kDone) {
      job->done++;
      job->record.task_runtime_us += task.runtime_us;
    }
    if (task.state == TaskState::kFailed) job->failed++;
    if (task.state == TaskState::kCancelled) {
      job->cancelled++;
      job->closed = true;
    }
  }
  for (auto& l : state.leases) {
    Job* job = FindJob(l.job);
    if (!job || l.index >= job->tasks.size() || job->record.state != JobState::kRunning) {
      continue;  // a lease of an ended job: nothing to re-issue
    }
    Task& task = job->tasks[l.index];
    if (Settled(task.state)) continue;
    Agent& agent = AgentFor(l.agent);
    if (Involves(task, agent)) continue;  // one replica per agent
    task.state = TaskState::kLeased;
    task.leases.push_back(l.id);
    job->leased++;
    job->leases.insert(l.id);
    agent.disconnected_at = now;
    agent.leases.insert(l.id);
    double estimate = task.cost_flop / options_.default_flops;
    double seconds = estimate * SpeedFactor(job->app);
    agent.held_seconds += seconds;
    // Renewals are not stored: a lease gets at least a renewal's length
    // from now, for its agent to reconnect and renew it again.
    Time deadline = std::max(l.deadline, now + options_.session_grace + options_.min_lease);
    leases_[l.id] = Lease{job, l.index, &agent, deadline, now + job->spec.task_timeout, estimate,
                          seconds};
    deadlines_.emplace(deadline, l.id);
    next_lease_id_ = std::max(next_lease_id_, l.id + 1);
  }
  // An agent's unchecked results in the order it produced them.
  std::stable_sort(state.replicas.begin(), state.replicas.end(),
                   [](const ReplicaRecord& a, const ReplicaRecord& b) { return a.lease < b.lease; });
  for (auto& r : state.replicas) {
    if (r.verdict == Verdict::kUnverified || r.verdict == Verdict::kVouched) {
      Agent& agent = AgentFor(r.agent);
      bool vouched = r.verdict == Verdict::kVouched;
      agent.unchecked.push_back({r.job, r.index, r.lease, vouched});
      Job* job = FindJob(r.job);
      if (!vouched && job && r.index < job->tasks.size() &&
          job->tasks[r.index].state == TaskState::kDone) {
        job->tasks[r.index].unchecked_by = &agent;
        job->tasks[r.index].unchecked_lease = r.lease;
      }
      continue;
    }
    Job* job = FindJob(r.job);
    if (!job || r.index >= job->tasks.size() || Settled(job->tasks[r.index].state)) continue;
    Task& task = job->tasks[r.index];
    Agent& agent = AgentFor(r.agent);
    if (Involves(task, agent)) continue;
    task.results.push_back(ReplicaResult{&agent, std::move(r.output), r.runtime_us, r.lease});
    job->record.task_runtime_us += r.runtime_us;
  }
  for (auto& [id, agent] : agents_) {
    if (!agent->leases.empty()) orphans_.emplace(agent->disconnected_at, agent.get());
  }
  for (Job* job : job_order_) {
    if (job->record.state != JobState::kRunning) continue;
    for (uint32_t i = 0; i < job->tasks.size(); ++i) {
      Task& task = job->tasks[i];
      if (Settled(task.state)) continue;
      size_t have = task.leases.size() + task.results.size();
      if (have < task.target) {
        task.queued = static_cast<uint32_t>(task.target - have);
        for (uint32_t k = 0; k < task.queued; ++k) job->pending.push_back(i);
        pending_total_ += task.queued;
      }
    }
    MarkRunnable(*job);
    if (job->spec.close_after.count() > 0) {
      close_times_.emplace(job->record.created + job->spec.close_after, job);
    }
    MaybeFinish(*job, now);  // it may have crashed before the merge
  }
  return Status::Ok();
}

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
  job->needs = job->app->Needs(job->spec);

  NewJob persisted;
  persisted.job = job->record;
  persisted.tasks.reserve(planned.tasks.size());
  job->tasks.resize(planned.tasks.size());
  for (uint32_t i = 0; i < planned.tasks.size(); ++i) {
    TaskSpec& ts = planned.tasks[i];
    persisted.tasks.push_back(TaskRecord{id, i, ts.params, ts.cost_flop});
    persisted.tasks.back().target = job->spec.replication;
    Task& task = job->tasks[i];
    task.params = std::move(ts.params);
    task.cost_flop = ts.cost_flop;
    task.target = job->spec.replication;
    task.queued = task.target;
    // Replicas next to each other: they run at the same time and settle soon.
    for (uint32_t k = 0; k < task.target; ++k) job->pending.push_back(i);
  }
  pending_total_ += job->pending.size();
  batch_.new_jobs.push_back(std::move(persisted));
  notices_.jobs_changed.insert(id);
  Job* raw = job.get();
  job_order_.push_back(raw);
  jobs_.emplace(id, std::move(job));
  MarkRunnable(*raw);
  if (raw->spec.close_after.count() > 0) close_times_.emplace(now + raw->spec.close_after, raw);
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

Status Scheduler::EndJob(const JobId& id, JobState state, std::string result_json,
                         std::string error, Time now) {
  Job* job = FindJob(id);
  if (!job) return NotFound("no job " + id);
  if (!job->app->Driven()) return FailedPrecondition("job " + id + " is not a driven job");
  if (IsFinal(job->record.state)) {
    return FailedPrecondition("job " + id + " has already ended (" +
                              JobStateName(job->record.state) + ")");
  }
  FinishJob(*job, state, std::move(result_json), std::move(error), now);
  return Status::Ok();
}

void Scheduler::MarkRunnable(Job& job) {
  bool should = job.record.state == JobState::kRunning && !job.pending.empty();
  RunKey key{-job.spec.priority, job.seq, &job};
  if (should && !job.runnable) runnable_.insert(key);
  if (!should && job.runnable) runnable_.erase(key);
  job.runnable = should;
}

void Scheduler::Requeue(Job& job, uint32_t index, uint32_t n) {
  Task& task = job.tasks[index];
  if (task.leases.empty()) task.state = TaskState::kPending;
  for (uint32_t k = 0; k < n; ++k) job.pending.push_front(index);  // they hold the job's tail
  task.queued += n;
  pending_total_ += n;
  MarkRunnable(job);
}

void Scheduler::RecordTask(const Job& job, uint32_t index) {
  const Task& t = job.tasks[index];
  batch_.task_updates.push_back(
      TaskUpdate{job.record.id, index, t.state, t.attempts, t.output, t.runtime_us, t.target});
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
  if (job.spec.close_after.count() > 0) {
    close_times_.erase({job.record.created + job.spec.close_after, &job});
  }
  batch_.job_updates.push_back(
      JobUpdate{job.record.id, state, now, job.record.result_json, job.record.error,
                job.record.task_runtime_us, job.record.n_tasks});
  notices_.jobs_changed.insert(job.record.id);
  // The results live in the store now; keep only the record in memory.
  std::vector<Task>().swap(job.tasks);
}

// Merges in task order, so the result does not depend on the order in which
// results arrived (floating-point addition is not associative).
void Scheduler::MergeJob(Job& job, Time now) {
  std::vector<std::string_view> outputs;
  outputs.reserve(job.tasks.size());
  for (const Task& t : job.tasks) {  // cancelled and failed: empty (App::ClosesEarly)
    outputs.push_back(t.state == TaskState::kDone ? std::string_view(t.output) : std::string_view());
  }
  auto merged = job.app->Merge(job.spec, outputs);
  if (merged.ok()) {
    // The job's owner may read the files its tasks made.
    for (std::string_view o : outputs) {
      for (std::string& h : job.app->OutputBlobs(o)) {
        batch_.blob_owners.push_back(BlobOwner{std::move(h), job.record.owner});
      }
    }
    FinishJob(job, JobState::kDone, merged->dump(), "", now);
  } else {
    FinishJob(job, JobState::kFailed, "", "merge failed: " + merged.status().message(), now);
  }
}

void Scheduler::Grow(Job& job, uint32_t settled) {
  if (!job.app->Grows(job.spec)) return;
  std::vector<App::TaskView> view;
  view.reserve(job.tasks.size());
  for (const Task& t : job.tasks) {
    view.push_back({t.params, t.state == TaskState::kDone ? std::string_view(t.output) : ""});
  }
  std::vector<TaskSpec> added = job.app->Expand(job.spec, view, settled);
  if (added.empty()) return;
  // Pushed to the front in reverse, so they run first and in their order.
  for (auto it = added.rbegin(); it != added.rend(); ++it) {
    uint32_t i = static_cast<uint32_t>(job.tasks.size());
    Task& task = job.tasks.emplace_back();
    task.params = std::move(it->params);
    task.cost_flop = it->cost_flop;
    task.target = job.spec.replication;
    TaskRecord rec{job.record.id, i, task.params, task.cost_flop};
    rec.target = task.target;
    batch_.tasks_added.push_back(std::move(rec));
    Requeue(job, i, task.target);
  }
  job.record.n_tasks = static_cast<uint32_t>(job.tasks.size());
  batch_.job_updates.push_back(JobUpdate{job.record.id, job.record.state, job.record.finished,
                                         "", "", job.record.task_runtime_us, job.record.n_tasks});
  notices_.jobs_changed.insert(job.record.id);
}

bool Scheduler::ShouldClose(const Job& job, Time now) const {
  if (job.closed || !job.spec.ClosesEarly() || job.record.state != JobState::kRunning) return false;
  if (job.spec.close_done > 0 && job.done >= job.spec.close_done) return true;
  return job.spec.close_after.count() > 0 && now >= job.record.created + job.spec.close_after &&
         job.done >= job.spec.close_min;
}

void Scheduler::Close(Job& job, Time now) {
  job.closed = true;
  pending_total_ -= job.pending.size();
  job.pending.clear();  // only unsettled tasks wait there
  for (uint32_t i = 0; i < job.tasks.size(); ++i) {
    Task& task = job.tasks[i];
    task.queued = 0;
    if (Settled(task.state)) continue;
    for (LeaseId id : std::vector<LeaseId>(task.leases)) {
      Lease l = EndLease(id);
      if (l.agent->connected) notices_.cancels[l.agent->id].push_back(id);
    }
    std::vector<ReplicaResult>().swap(task.results);
    task.unchecked_by = nullptr;  // nothing of it is merged, nothing to check
    task.state = TaskState::kCancelled;
    job.cancelled++;
    RecordTask(job, i);
  }
  MarkRunnable(job);
  notices_.jobs_changed.insert(job.record.id);
  MaybeFinish(job, now);
}

void Scheduler::MaybeFinish(Job& job, Time now) {
  if (job.record.state != JobState::kRunning || job.app->Driven()) return;
  if (ShouldClose(job, now)) {
    Close(job, now);  // calls back here, closed
    return;
  }
  // A job that closes early also ends when nothing more can come: every
  // task settled, one at least done.
  bool complete = job.closed || job.spec.ClosesEarly()
                      ? job.done + job.failed + job.cancelled == job.tasks.size() && job.done > 0
                      : job.done == job.tasks.size();
  if (!complete) return;
  // One task per agent: the one it answered last. Passing that check
  // vouches for its earlier answers too (Judge). A job that closes early
  // (a round of training) does not wait for such checks: its point is not
  // to wait; spot checks while it runs judge its agents.
  std::map<Agent*, uint32_t> to_check;
  if (job.spec.ClosesEarly()) {
    MergeJob(job, now);
    return;
  }
  for (uint32_t i = 0; i < job.tasks.size(); ++i) {
    const Task& t = job.tasks[i];
    if (!t.unchecked_by || t.state != TaskState::kDone) continue;
    auto it = to_check.find(t.unchecked_by);
    if (it == to_check.end() || job.tasks[it->second].unchecked_lease < t.unchecked_lease) {
      to_check[t.unchecked_by] = i;
    }
  }
  if (to_check.empty()) {
    MergeJob(job, now);
    return;
  }
  for (auto [agent, index] : to_check) {
    Task& task = job.tasks[index];
    task.state = TaskState::kPending;
    job.done--;
    task.results.push_back(ReplicaResult{agent, std::move(task.output), 0, task.unchecked_lease});
    task.output.clear();
    task.target = std::max<uint32_t>(job.spec.replication, 2);
    Requeue(job, index, task.target - 1);
    RecordTask(job, index);
  }
  notices_.jobs_changed.insert(job.record.id);
}

JobView Scheduler::ViewOf(const Job& job) const {
  JobView v{job.record, job.done, job.leased, job.failed, {}};
  if (job.record.state == JobState::kDone) v.done = job.record.n_tasks;
  if (job.record.state == JobState::kRunning) v.waiting = WaitingReason(job);
  return v;
}

std::optional<JobView> Scheduler::GetJob(const JobId& id) const {
  const Job* job = FindJob(id);
  if (!job) return std::nullopt;
  return ViewOf(*job);
}

std::vector<JobId> Scheduler::RunningJobsUnder(std::string_view prefix) const {
  std::vector<JobId> out;
  for (const auto& [id, job] : jobs_) {
    if (id.starts_with(prefix) && job->record.state == JobState::kRunning) out.push_back(id);
  }
  return out;
}

std::vector<JobView> Scheduler::ListJobs(size_t limit) const {
  std::vector<JobView> out;
  for (auto it = job_order_.rbegin(); it != job_order_.rend() && out.size() < limit; ++it) {
    out.push_back(ViewOf(**it));
  }
  return out;
}

}  // namespace claw

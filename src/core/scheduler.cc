// The scheduler's agents, leases and dispatch (with the work buffer), and
// the results and failures that come back on leases. A job's life is in
// scheduler_jobs.cc; votes, trust and reputation in scheduler_votes.cc.
#include "core/scheduler.h"

#include "core/scheduler_state.h"

#include <algorithm>
#include <cmath>

namespace claw {

bool Scheduler::ById::operator()(const Agent* a, const Agent* b) const { return a->id < b->id; }

Scheduler::Scheduler(const AppRegistry* apps, SchedulerOptions options)
    : apps_(apps), options_(options), rng_(options.seed) {}

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

// ---- which agent may take which task ---------------------------------------------

bool Scheduler::RunsNeeds(const Agent& agent, const Job& job) const {
  if (agent.apps.empty()) return true;  // it did not say: anything
  for (const std::string& need : job.needs) {
    if (std::find(agent.apps.begin(), agent.apps.end(), need) == agent.apps.end()) return false;
  }
  return true;
}

bool Scheduler::Involves(const Task& task, const Agent& agent) const {
  auto same = [&](const Agent* other) {
    return other == &agent || (options_.distinct_owners && !agent.owner.empty() &&
                               other->owner == agent.owner);
  };
  for (LeaseId l : task.leases) {
    auto it = leases_.find(l);
    if (it != leases_.end() && same(it->second.agent)) return true;
  }
  for (const auto& r : task.results) {
    if (same(r.agent)) return true;
  }
  return false;
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

bool Scheduler::AnyLeasedTask(const AgentId& id,
                              const std::function<bool(const App&, std::string_view)>& fn) const {
  auto it = agents_.find(id);
  if (it == agents_.end()) return false;
  for (LeaseId l : it->second->leases) {
    auto lease = leases_.find(l);
    if (lease == leases_.end()) continue;
    const Job& job = *lease->second.job;
    if (job.app && lease->second.index < job.tasks.size() &&
        fn(*job.app, job.tasks[lease->second.index].params)) {
      return true;
    }
  }
  return false;
}

const App* Scheduler::AppOfLease(LeaseId lease, const AgentId& holder) const {
  auto it = leases_.find(lease);
  if (it == leases_.end() || it->second.agent->id != holder) return nullptr;
  return it->second.job->app;
}

std::string Scheduler::ParamsOfLease(LeaseId lease, const AgentId& holder) const {
  auto it = leases_.find(lease);
  if (it == leases_.end() || it->second.agent->id != holder) return {};
  return it->second.job->tasks[it->second.index].params;
}

void Scheduler::SetAgentOwner(const AgentId& id, const std::string& owner) {
  AgentFor(id).owner = owner;
}

void Scheduler::SetAgentApps(const AgentId& id, std::vector<std::string> apps) {
  AgentFor(id).apps = std::move(apps);
}

void Scheduler::SetAgentSlots(const AgentId& id, uint32_t slots) {
  AgentFor(id).slots = std::max<uint32_t>(slots, 1);
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

Scheduler::AgentCounts Scheduler::CountAgents() const {
  AgentCounts c;
  for (const auto& [id, a] : agents_) {
    if (!a->connected) continue;
    (a->leases.empty() ? c.idle : c.working)++;
  }
  return c;
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
  double estimate = task.cost_flop / std::max(agent.flops, 1.0);
  double seconds = options_.lease_slack * estimate;
  // At least what the task itself may take by its params (exec's timeout).
  seconds = std::max(seconds, job.app ? job.app->TaskSeconds(task.params) : 0.0);
  Duration length = std::max(options_.min_lease,
                             Duration(static_cast<int64_t>(std::min(seconds, 1e12) * 1e6)));
  length = std::min(length, job.spec.task_timeout);
  Time deadline = now + length;
  task.state = TaskState::kLeased;
  task.leases.push_back(id);
  job.leased++;
  job.leases.insert(id);
  agent.leases.insert(id);
  // Leases keep the raw estimate (a short lease would expire good work); the
  // work buffer uses the corrected one.
  double corrected = estimate * SpeedFactor(job.app);
  agent.held_seconds += corrected;
  if (options_.keep_books) {
    if (!last_share_ || last_owner_ != job.record.owner) {
      last_owner_ = job.record.owner;
      last_share_ = &owners_[job.record.owner];  // stable: unordered_map nodes do not move
    }
    ShareKey(*last_share_, now);  // decays only when time has passed
    last_share_->usage += corrected;
  }
  leases_.emplace(id, Lease{&job, index, &agent, deadline, now + job.spec.task_timeout, estimate,
                            corrected, false, now});
  if (task.results.empty() && task.leases.size() == 1) {  // the task's first replica
    histograms_.queue_wait.Observe(static_cast<double>((now - job.record.created).count()) / 1e6);
  }
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
  if (l.index < l.job->tasks.size()) std::erase(l.job->tasks[l.index].leases, id);
  l.agent->leases.erase(id);
  l.agent->held_seconds = l.agent->leases.empty() ? 0 : std::max(0.0, l.agent->held_seconds - l.seconds);
  if (l.agent->leases.empty()) orphans_.erase({l.agent->disconnected_at, l.agent});
  batch_.leases_ended.push_back(id);
  notices_.jobs_changed.insert(l.job->record.id);
  return l;
}

std::vector<AgentAssignments> Scheduler::Dispatch(Time now) {
  std::vector<AgentAssignments> out;
  if (wanting_.empty() || runnable_.empty()) return out;
  std::unordered_map<Agent*, size_t> slot_of;
  std::vector<Agent*> blocked;
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
      uint32_t granted = 0;
      std::vector<Job*> jobs;
      for (const RunKey& k : runnable_) jobs.push_back(k.job);
      ShareOut(jobs, now);
      for (Job* job : jobs) {
        granted += TakeFrom(*job, *agent, take - granted, now, &list);
        if (granted == take) break;
      }
      agent->demand -= granted;
      // Nothing here it may run (it holds or has answered every pending
      // replica): it waits for new work, keeping its demand.
      if (agent->demand == 0 || granted == 0) wanting_.erase(agent);
      if (granted == 0) blocked.push_back(agent);
    }
  }
  for (Agent* agent : blocked) {
    if (agent->demand > 0 && agent->connected) wanting_.insert(agent);
  }
  if (!out.empty()) batch_.next_lease_id = next_lease_id_;
  std::erase_if(out, [](const AgentAssignments& a) { return a.assignments.empty(); });
  return out;
}

double Scheduler::ShareKey(OwnerShare& share, Time now) const {
  const double dt = static_cast<double>((now - share.usage_at).count()) / 1e6;
  const double half = static_cast<double>(options_.fair_share_half_life.count()) / 1e6;
  if (dt > 0 && half > 0) share.usage *= std::exp2(-dt / half);
  share.usage_at = now;
  return share.usage / std::max(share.weight, 1e-9);
}

void Scheduler::ShareOut(std::vector<Job*>& jobs, Time now) {
  if (held_owners_ > 0) {
    std::erase_if(jobs, [&](Job* j) {
      auto it = owners_.find(j->record.owner);
      return it != owners_.end() && !it->second.held.empty();
    });
  }
  if (jobs.size() < 2) return;
  const std::string& first = jobs.front()->record.owner;
  if (std::all_of(jobs.begin(), jobs.end(), [&](Job* j) { return j->record.owner == first; })) {
    return;  // one user: their own order
  }
  std::unordered_map<const std::string*, double> key;  // by the owner string of each job
  std::unordered_map<std::string, double> by_owner;
  for (Job* j : jobs) {
    auto [it, fresh] = by_owner.try_emplace(j->record.owner, 0.0);
    if (fresh) it->second = ShareKey(owners_[j->record.owner], now);
    key[&j->record.owner] = it->second;
  }
  std::stable_sort(jobs.begin(), jobs.end(), [&](Job* a, Job* b) {
    return key[&a->record.owner] < key[&b->record.owner];
  });
}

void Scheduler::SetOwnerWeight(const std::string& owner, double weight) {
  owners_[owner].weight = weight > 0 ? weight : 1;
}

void Scheduler::HoldOwner(const std::string& owner, std::string reason) {
  OwnerShare& share = owners_[owner];
  if (share.held.empty() == reason.empty() && share.held == reason) return;
  if (share.held.empty() && !reason.empty()) held_owners_++;
  if (!share.held.empty() && reason.empty()) held_owners_--;
  share.held = std::move(reason);
  for (const auto& [id, job] : jobs_) {
    if (job->record.owner == owner && job->record.state == JobState::kRunning) {
      notices_.jobs_changed.insert(id);
    }
  }
}

uint32_t Scheduler::TakeFrom(Job& job, Agent& agent, uint32_t n, Time now,
                             std::vector<Assignment>* out) {
  // Bounded, so that an agent that has seen most of a long queue does not
  // make every dispatch walk all of it.
  constexpr size_t kMaxSkips = 256;
  if (!RunsNeeds(agent, job)) return 0;
  std::vector<uint32_t> aside;
  uint32_t granted = 0;
  while (granted < n && !job.pending.empty() && aside.size() < kMaxSkips) {
    // Enough work on hand: one task per slot, then as much as fills the
    // work buffer (long tasks are not hoarded by whoever asked first).
    if (agent.leases.size() >= agent.slots &&
        agent.held_seconds >= options_.work_buffer_seconds * agent.slots) {
      break;
    }
    uint32_t index = job.pending.front();
    job.pending.pop_front();
    Task& task = job.tasks[index];
    size_t have = task.leases.size() + task.results.size();
    if (Settled(task.state) || have >= task.target) {  // a replica no longer needed
      task.queued--;
      pending_total_--;
      continue;
    }
    if (Involves(task, agent)) {
      aside.push_back(index);
      continue;
    }
    task.queued--;
    pending_total_--;
    if (have == 0) DecideReplication(job, index, agent);
    out->emplace_back();
    Grant(job, index, agent, now, &out->back());
    granted++;
  }
  for (auto it = aside.rbegin(); it != aside.rend(); ++it) job.pending.push_front(*it);
  if (granted > 0) notices_.jobs_changed.insert(job.record.id);
  MarkRunnable(job);
  return granted;
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
    LearnSpeed(l.job->app, static_cast<double>(r.runtime_us) / 1e6, l.estimate);
    histograms_.task_run.Observe(static_cast<double>(r.runtime_us) / 1e6);
    histograms_.round_trip.Observe(static_cast<double>((now - l.granted).count()) / 1e6);
    AddResult(*l.job, l.index, *l.agent, r, now);
    outcomes.push_back(ResultOutcome::kAccepted);
  }
  return outcomes;
}

double Scheduler::SpeedFactor(const App* app) const {
  auto it = speed_.find(app);
  return it == speed_.end() ? 1.0 : it->second;
}

void Scheduler::LearnSpeed(const App* app, double seconds, double estimate) {
  if (estimate <= 0 || seconds <= 0) return;
  double ratio = std::clamp(seconds / estimate, 1e-4, 1e4);
  auto [it, fresh] = speed_.emplace(app, ratio);
  if (!fresh) it->second = 0.8 * it->second + 0.2 * ratio;
}

void Scheduler::AddResult(Job& job, uint32_t index, Agent& agent, ResultIn& result, Time now) {
  Task& task = job.tasks[index];
  job.record.task_runtime_us += result.runtime_us;
  if (job.spec.quorum > 1) {  // kept until the vote
    batch_.replicas_added.push_back(
        ReplicaRecord{job.record.id, index, agent.id, result.output, result.runtime_us,
                      Verdict::kPending, result.lease});
  }
  task.results.push_back(
      ReplicaResult{&agent, std::move(result.output), result.runtime_us, result.lease});
  Vote(job, index, now);
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
  if (LeaveOut(job, index, now)) return;
  task.state = TaskState::kFailed;
  job.failed++;
  RecordTask(job, index);
  FinishJob(job, JobState::kFailed, "",
            "task " + std::to_string(index) + " failed " + std::to_string(task.attempts) +
                " times; last: " + reason,
            now);
}

bool Scheduler::LeaveOut(Job& job, uint32_t index, Time now) {
  // A job that closes early goes on while enough of its tasks still may be
  // done; its merge leaves the failed one out, and the failed task's other
  // replicas stop.
  uint32_t need = job.spec.close_after.count() > 0 ? job.spec.close_min : job.spec.close_done;
  if (!job.spec.ClosesEarly() ||
      job.tasks.size() - job.failed - 1 - job.cancelled < std::max<uint32_t>(need, 1)) {
    return false;
  }
  Task& task = job.tasks[index];
  for (LeaseId id : std::vector<LeaseId>(task.leases)) {
    Lease l = EndLease(id);
    if (l.agent->connected) notices_.cancels[l.agent->id].push_back(id);
  }
  std::vector<ReplicaResult>().swap(task.results);  // its queued entries lapse in Dispatch
  task.unchecked_by = nullptr;
  task.state = TaskState::kFailed;
  job.failed++;
  RecordTask(job, index);
  tie_waits_.erase({job.record.id, index});
  MaybeFinish(job, now);
  return true;
}

size_t Scheduler::RenewLeases(const AgentId& agent_id, const std::vector<LeaseId>& running,
                              const std::vector<LeaseId>& started, Time now) {
  for (LeaseId id : started) {
    auto it = leases_.find(id);
    if (it == leases_.end() || it->second.agent->id != agent_id || it->second.started) continue;
    Lease& l = it->second;
    l.started = true;
    l.last_deadline = std::max(l.last_deadline, now + l.job->spec.task_timeout);
  }
  size_t renewed = 0;
  for (LeaseId id : running) {
    auto it = leases_.find(id);
    if (it == leases_.end() || it->second.agent->id != agent_id) continue;
    Lease& l = it->second;
    Time deadline = std::min(now + options_.min_lease, l.last_deadline);
    if (deadline <= l.deadline) continue;
    deadlines_.erase({l.deadline, id});
    l.deadline = deadline;
    deadlines_.emplace(deadline, id);
    ++renewed;
  }
  return renewed;
}

bool Scheduler::LeaseReturned(const AgentId& agent_id, LeaseId lease, Time now) {
  auto it = leases_.find(lease);
  if (it == leases_.end() || it->second.agent->id != agent_id) return false;
  Lease l = EndLease(lease);
  Requeue(*l.job, l.index);
  (void)now;
  return true;
}

bool Scheduler::ResultRejected(const AgentId& agent_id, LeaseId lease, const std::string& reason,
                               Time now) {
  auto it = leases_.find(lease);
  if (it == leases_.end() || it->second.agent->id != agent_id) return false;
  Agent* agent = it->second.agent;
  Lease l = EndLease(lease);
  FailTask(*l.job, l.index, "its result was refused: " + reason, now);
  Judge(*agent, false, lease, now);
  return true;
}

void Scheduler::CountWrongAnswer(const AgentId& agent_id, Time now) {
  Judge(AgentFor(agent_id), false, 0, now);
}

void Scheduler::Tick(Time now) {
  while (!close_times_.empty() && close_times_.begin()->first <= now) {
    Job* job = close_times_.begin()->second;
    close_times_.erase(close_times_.begin());
    if (ShouldClose(*job, now)) Close(*job, now);
    // Otherwise it closes as soon as close_min are done (MaybeFinish).
  }
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
  CheckTieWaits(now);
}

std::optional<Time> Scheduler::NextWakeup() const {
  std::optional<Time> t;
  if (!deadlines_.empty()) t = deadlines_.begin()->first;
  if (!orphans_.empty()) {
    Time o = orphans_.begin()->first + options_.session_grace;
    if (!t || o < *t) t = o;
  }
  if (!tie_waits_.empty() && (!t || next_tie_check_ < *t)) t = next_tie_check_;
  if (!close_times_.empty() && (!t || close_times_.begin()->first < *t)) {
    t = close_times_.begin()->first;
  }
  return t;
}

// ---- what the store and the coordinator take -------------------------------------------

StoreBatch Scheduler::TakeBatch() { return std::exchange(batch_, StoreBatch{}); }
Notices Scheduler::TakeNotices() { return std::exchange(notices_, Notices{}); }

}  // namespace claw

// Redundancy and trust: how many answers a task needs, voting on them,
// judging the agents that gave them, and adaptive replication's spot checks
// (ADR 0002). Leases and dispatch are in scheduler.cc; a job's life in scheduler_jobs.cc.
#include <algorithm>

#include "core/scheduler.h"
#include "core/scheduler_state.h"

namespace claw {

void Scheduler::DecideReplication(Job& job, uint32_t index, const Agent& agent) {
  if (!job.spec.adaptive || job.spec.quorum <= 1) return;
  Task& task = job.tasks[index];
  uint32_t want = job.spec.replication;
  if (Trusted(agent) &&
      std::uniform_real_distribution<double>(0, 1)(rng_) >= job.spec.spot_check) {
    want = 1;
  }
  if (want == task.target) return;
  // Queue entries beyond the target are dropped as they come up; missing
  // ones (a task that had been going to run once) are added.
  uint32_t outstanding = want - 1;
  if (task.queued < outstanding) Requeue(job, index, outstanding - task.queued);
  task.target = want;
  RecordTask(job, index);
}

bool Scheduler::Trusted(const Agent& agent) const {
  return agent.reputation.streak >= options_.trust_streak &&
         agent.reputation.error_rate < options_.trust_error_rate;
}

void Scheduler::Vote(Job& job, uint32_t index, Time now) {
  Task& task = job.tasks[index];
  // A task that runs once (adaptive replication) settles on its one result.
  const uint32_t quorum = std::min(job.spec.quorum, task.target);
  size_t best = 0, best_count = 0;
  if (task.results.size() >= quorum) {
    for (size_t i = 0; i < task.results.size(); ++i) {
      size_t count = 1;
      for (size_t j = 0; j < task.results.size(); ++j) {
        if (j != i && job.app->Equivalent(task.params, task.results[i].output, task.results[j].output)) {
          count++;
        }
      }
      if (count > best_count) best = i, best_count = count;
      if (best_count >= quorum) break;
    }
    if (best_count >= quorum) {
      Settle(job, index, best, now);
      return;
    }
  }
  if (!task.leases.empty() || task.queued > 0) return;  // more answers coming
  if (task.results.size() < task.target) {
    Requeue(job, index, static_cast<uint32_t>(task.target - task.results.size()));
    return;
  }
  size_t counted = 0;  // answers from agents not on probation
  for (const auto& r : task.results) {
    counted += r.agent->reputation.error_rate < options_.probation_error_rate;
  }
  if (counted < job.spec.max_replicas && task.results.size() < 2 * job.spec.max_replicas) {
    task.target++;  // a tie-breaker
    Requeue(job, index);
    RecordTask(job, index);
    tie_waits_.try_emplace({job.record.id, index}, now);
    return;
  }
  for (const auto& r : task.results) {
    batch_.verdicts.push_back(VerdictUpdate{job.record.id, index, r.agent->id, Verdict::kInvalid});
  }
  FailForNoQuorum(job, index,
                  "at most " + std::to_string(std::max<size_t>(best_count, 1)) + " agree, " +
                      std::to_string(quorum) + " needed",
                  now);
}

std::string Scheduler::Disagreement(const Job& job, const Task& task) const {
  for (size_t i = 1; i < task.results.size(); ++i) {
    if (!job.app->Equivalent(task.params, task.results[0].output, task.results[i].output)) {
      return job.app->Difference(task.params, task.results[0].output, task.results[i].output);
    }
  }
  return "";
}

void Scheduler::FailForNoQuorum(Job& job, uint32_t index, const std::string& why, Time now) {
  Task& task = job.tasks[index];
  std::string differ = Disagreement(job, task);
  task.last_error = "no quorum" + (differ.empty() ? "" : ": they differ in " + differ);
  if (LeaveOut(job, index, now)) return;  // a job that closes early goes on without it
  task.state = TaskState::kFailed;
  job.failed++;
  RecordTask(job, index);
  tie_waits_.erase({job.record.id, index});
  FinishJob(job, JobState::kFailed, "",
            "task " + std::to_string(index) + ": no quorum among " +
                std::to_string(task.results.size()) + " results" +
                (differ.empty() ? "" : ": they differ in " + differ) + "; " + why,
            now);
}

bool Scheduler::AnyAgentCouldTake(const Job& job, const Task& task) const {
  for (const auto& [id, agent] : agents_) {
    if (agent->connected && RunsNeeds(*agent, job) && !Involves(task, *agent)) return true;
  }
  return false;
}

void Scheduler::CheckTieWaits(Time now) {
  if (tie_waits_.empty() || now < next_tie_check_) return;
  next_tie_check_ = now + std::chrono::seconds(1);
  for (auto it = tie_waits_.begin(); it != tie_waits_.end();) {
    Job* job = FindJob(it->first.first);
    uint32_t index = it->first.second;
    if (!job || job->record.state != JobState::kRunning || index >= job->tasks.size() ||
        Settled(job->tasks[index].state) || !job->tasks[index].leases.empty()) {
      it = tie_waits_.erase(it);  // settled, or a tie-breaker runs
      continue;
    }
    Task& task = job->tasks[index];
    if (AnyAgentCouldTake(*job, task)) {
      it->second = now;
      ++it;
      continue;
    }
    if (now - it->second < job->spec.quorum_wait) {
      ++it;
      continue;
    }
    ++it;  // FailForNoQuorum erases the entry
    int64_t waited = std::chrono::duration_cast<std::chrono::seconds>(job->spec.quorum_wait).count();
    FailForNoQuorum(*job, index,
                    "no agent that could break the tie (one that has not answered it, of "
                    "another owner) was connected for " + std::to_string(waited) + " s",
                    now);
  }
}

size_t Scheduler::running_jobs() const {
  size_t n = 0;
  for (const Job* j : job_order_) n += j->record.state == JobState::kRunning ? 1 : 0;
  return n;
}

Scheduler::AgentWork Scheduler::WorkOf(const AgentId& id, bool explain) const {
  AgentWork w;
  auto it = agents_.find(id);
  if (it == agents_.end()) return w;
  const Agent& agent = *it->second;
  w.known = true;
  w.connected = agent.connected;
  w.demand = agent.demand;
  w.leases = agent.leases.size();
  for (LeaseId l : agent.leases) {
    auto lit = leases_.find(l);
    if (lit == leases_.end() || !lit->second.job) continue;
    const JobId& job = lit->second.job->record.id;
    if (std::find(w.jobs.begin(), w.jobs.end(), job) == w.jobs.end() && w.jobs.size() < 8) {
      w.jobs.push_back(job);
    }
  }
  if (!explain || !agent.connected || w.leases > 0) return w;
  if (agent.demand == 0) {
    w.why_no_work = "it asks for no work";
    return w;
  }
  if (runnable_.empty()) {
    w.why_no_work = "no work queued";
    return w;
  }
  size_t held = 0, cannot = 0, replicas = 0;
  std::string needs;
  size_t looked = 0;
  for (const RunKey& k : runnable_) {
    if (++looked > 200) break;
    const Job& job = *k.job;
    if (held_owners_ > 0) {
      auto o = owners_.find(job.record.owner);
      if (o != owners_.end() && !o->second.held.empty()) {
        ++held;
        continue;
      }
    }
    if (!RunsNeeds(agent, job)) {
      ++cannot;
      if (needs.empty()) {
        for (const std::string& n : job.needs) needs += (needs.empty() ? "" : ", ") + n;
      }
      continue;
    }
    bool other = !job.pending.empty();
    for (uint32_t i : job.pending) {
      if (!Involves(job.tasks[i], agent)) {
        other = false;
        break;
      }
    }
    if (other) {
      ++replicas;
      continue;
    }
    return w;  // it can take something: the next dispatch sends it
  }
  std::string why;
  auto add = [&](const std::string& part) { why += (why.empty() ? "" : "; ") + part; };
  if (cannot > 0) add(std::to_string(cannot) + " queued job(s) need apps it does not run (" + needs + ")");
  if (held > 0) add(std::to_string(held) + " queued job(s) are held (their owners are over quota)");
  if (replicas > 0) {
    add(std::to_string(replicas) + " queued job(s) need replicas from other devices (of other owners)");
  }
  w.why_no_work = "no queued task it can run: " + why;
  return w;
}

std::string Scheduler::WaitingReason(const Job& job) const {
  if (held_owners_ > 0) {
    auto it = owners_.find(job.record.owner);
    if (it != owners_.end() && !it->second.held.empty()) return "held: " + it->second.held;
  }
  for (auto it = tie_waits_.lower_bound({job.record.id, 0});
       it != tie_waits_.end() && it->first.first == job.record.id; ++it) {
    const Task& task = job.tasks[it->first.second];
    if (!task.leases.empty() || AnyAgentCouldTake(job, task)) continue;
    std::string differ = Disagreement(job, task);
    int64_t wait = std::chrono::duration_cast<std::chrono::seconds>(job.spec.quorum_wait).count();
    return "task " + std::to_string(it->first.second) + " needs another agent: its " +
           std::to_string(task.results.size()) + " answers differ" +
           (differ.empty() ? "" : " in " + differ) +
           ", and no connected agent may break the tie (it fails after " + std::to_string(wait) +
           " s without one)";
  }
  if (job.leased == 0 && !job.pending.empty()) {
    const Task& first = job.tasks[job.pending.front()];
    if (!first.results.empty() && !AnyAgentCouldTake(job, first)) {
      return "task " + std::to_string(job.pending.front()) + " needs " +
             std::to_string(first.target - first.results.size()) +
             " more agent(s) that have not run it (of other owners): each replica runs on a "
             "different agent";
    }
    bool any = false;
    for (const auto& [id, agent] : agents_) {
      if (agent->connected && RunsNeeds(*agent, job)) {
        any = true;
        break;
      }
    }
    if (!any) {
      std::string needs;
      for (const std::string& n : job.needs) needs += (needs.empty() ? "" : ", ") + n;
      return "no connected agent runs " + needs;
    }
  }
  return "";
}

void Scheduler::Settle(Job& job, uint32_t index, size_t canonical, Time now) {
  Task& task = job.tasks[index];
  const ReplicaResult& winner = task.results[canonical];
  struct Judged {
    Agent* agent;
    bool valid;
    LeaseId lease;
  };
  std::vector<Judged> judged;
  std::vector<std::pair<Agent*, uint64_t>> earners;  // results that earn credit
  if (job.spec.quorum <= 1 || task.results.size() == 1) {
    earners.emplace_back(winner.agent, winner.runtime_us);
  }
  if (job.spec.quorum > 1 && task.results.size() == 1) {  // accepted unchecked
    batch_.verdicts.push_back(
        VerdictUpdate{job.record.id, index, winner.agent->id, Verdict::kUnverified});
    winner.agent->unchecked.push_back({job.record.id, index, winner.lease});
    task.unchecked_by = winner.agent;
    task.unchecked_lease = winner.lease;
  } else if (job.spec.quorum > 1) {
    for (size_t i = 0; i < task.results.size(); ++i) {
      const ReplicaResult& r = task.results[i];
      bool valid = i == canonical || job.app->Equivalent(task.params, r.output, winner.output);
      batch_.verdicts.push_back(VerdictUpdate{job.record.id, index, r.agent->id,
                                              valid ? Verdict::kValid : Verdict::kInvalid});
      judged.push_back({r.agent, valid, r.lease});
      if (valid) earners.emplace_back(r.agent, r.runtime_us);
    }
  }
  GrantCredit(job, index, earners);
  // Replicas still running are not needed any more.
  for (LeaseId id : std::vector<LeaseId>(task.leases)) {
    Lease l = EndLease(id);
    if (l.agent->connected) notices_.cancels[l.agent->id].push_back(id);
  }
  task.state = TaskState::kDone;
  task.output = std::move(task.results[canonical].output);
  task.runtime_us = 0;  // the compute every replica spent on it
  for (const auto& r : task.results) task.runtime_us += r.runtime_us;
  if (options_.keep_books) {
    if (!batch_.usage.empty() && batch_.usage.back().user == job.record.owner) {
      batch_.usage.back().node_us += task.runtime_us;  // folded, as credit grants are
    } else {
      batch_.usage.push_back(UsageCharge{job.record.owner, task.runtime_us});
    }
  }
  std::vector<ReplicaResult>().swap(task.results);
  if (!judged.empty()) task.unchecked_by = nullptr;
  job.done++;
  RecordTask(job, index);
  Grow(job, index);
  // After the task is settled: a failed check may send other tasks of this
  // very job back to pending.
  for (const Judged& j : judged) Judge(*j.agent, j.valid, j.lease, now);
  MaybeFinish(job, now);
}

double Scheduler::Claim(const Task& task, const Agent& agent, uint64_t runtime_us) const {
  const double flops = agent.flops > 0 ? agent.flops : options_.default_flops;
  return ClaimedFlop(flops, runtime_us, task.cost_flop * options_.credit.bound_factor) /
         kFlopPerCredit;
}

void Scheduler::GrantCredit(const Job& job, uint32_t index,
                            std::span<const std::pair<Agent*, uint64_t>> earners) {
  if (!options_.keep_books) return;
  const Task& task = job.tasks[index];
  double each = 0;  // the lowest claim (QuorumClaim), without a vector per task
  for (size_t i = 0; i < earners.size(); ++i) {
    const double c = Claim(task, *earners[i].first, earners[i].second);
    each = i == 0 ? c : std::min(each, c);
  }
  for (const auto& [agent, runtime_us] : earners) AddGrant(job, index, *agent, each, runtime_us);
}

void Scheduler::AddGrant(const Job& job, uint32_t index, const Agent& agent, double credit,
                         uint64_t runtime_us) {
  // Consecutive grants of one job to one agent fold into one.
  if (!batch_.credits.empty()) {
    CreditGrant& last = batch_.credits.back();
    if (last.agent == agent.id && last.job == job.record.id && (last.credit < 0) == (credit < 0)) {
      last.credit += credit;
      last.results++;
      last.runtime_us = std::max(last.runtime_us, runtime_us);
      return;
    }
  }
  batch_.credits.push_back(CreditGrant{job.record.id, index, agent.id, agent.owner, credit, runtime_us});
}

void Scheduler::Unsettle(Job& job, uint32_t index, const Agent& agent) {
  Task& task = job.tasks[index];
  if (task.state != TaskState::kDone) return;
  // It was done on this agent's word alone (its one result's run time).
  AddGrant(job, index, agent, -Claim(task, agent, task.runtime_us), task.runtime_us);
  task.state = TaskState::kPending;
  task.output.clear();
  task.unchecked_by = nullptr;
  task.target = job.spec.replication;
  job.done--;
  Requeue(job, index, task.target);
  RecordTask(job, index);
  notices_.jobs_changed.insert(job.record.id);
}

void Scheduler::Judge(Agent& agent, bool valid, LeaseId lease, Time now) {
  Reputation& rep = agent.reputation;
  if (valid) {
    rep.valid++;
    rep.streak++;
    rep.error_rate *= options_.error_decay;
  } else {
    rep.invalid++;
    rep.streak = 0;
    rep.error_rate = std::min(1.0, rep.error_rate + options_.error_step);
  }
  batch_.reputations[agent.id] = rep;
  // A vote is a spot check. A good answer vouches for what the agent gave
  // unchecked before it (not after: it may have turned since), so that a job
  // waiting for the agent's word to be checked may merge (MaybeFinish). A
  // bad one sends back to a vote everything the agent gave unchecked in jobs
  // not yet merged, vouched for or not: one lucky honest answer must not
  // launder earlier lies. A job never merges while it holds an answer no
  // check has vouched for, so nothing published is taken back.
  std::vector<Job*> vouched;
  std::vector<Agent::Unchecked> kept;
  for (auto& u : std::exchange(agent.unchecked, {})) {
    Job* job = FindJob(u.job);
    bool running = job && job->record.state == JobState::kRunning && u.index < job->tasks.size();
    if (!running) continue;  // merged, failed or cancelled: nothing left to take back
    if (valid) {
      if (!u.vouched && u.lease <= lease) {
        u.vouched = true;
        batch_.verdicts.push_back(VerdictUpdate{u.job, u.index, agent.id, Verdict::kVouched});
        Task& task = job->tasks[u.index];
        if (task.unchecked_by == &agent) {
          task.unchecked_by = nullptr;
          vouched.push_back(job);
        }
      }
      kept.push_back(std::move(u));
      continue;
    }
    batch_.verdicts.push_back(VerdictUpdate{u.job, u.index, agent.id, Verdict::kRevoked});
    Task& task = job->tasks[u.index];
    if (task.state == TaskState::kDone) {
      Unsettle(*job, u.index, agent);
    } else if (std::erase_if(task.results, [&](const ReplicaResult& r) { return r.agent == &agent; })) {
      // It was under check: its answer leaves the vote.
      task.unchecked_by = nullptr;
      size_t have = task.leases.size() + task.results.size() + task.queued;
      if (have < task.target) Requeue(*job, u.index, static_cast<uint32_t>(task.target - have));
    }
  }
  agent.unchecked = std::move(kept);
  // A job may have been waiting only for this agent's word to be checked.
  for (Job* job : vouched) MaybeFinish(*job, now);
}

Reputation Scheduler::ReputationOf(const AgentId& id) const {
  auto it = agents_.find(id);
  return it == agents_.end() ? Reputation{} : it->second->reputation;
}

}  // namespace claw

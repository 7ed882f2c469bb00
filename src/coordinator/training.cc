// The coordinator's side of training in rounds: what the round driver
// (rounds/driver.h) asks of it, and the driver's thread.
#include "coordinator/coordinator.h"

#include "common/text.h"
#include "core/job_spec.h"

namespace claw {

void Coordinator::StartDriver() {
  driver_ = std::make_unique<rounds::RoundDriver>(static_cast<rounds::RoundHost*>(this),
                                                  options_.blobs, log_);
  driver_thread_ = std::thread([this] { DriverLoop(); });
}

void Coordinator::DriverLoop() {
  for (;;) {
    {
      std::unique_lock lock(driver_mu_);
      driver_cv_.wait_for(lock, std::chrono::milliseconds(200),
                          [this] { return driver_wake_ || driver_stop_; });
      if (driver_stop_) return;
      driver_wake_ = false;
    }
    StepTrainings();
  }
}

void Coordinator::StepTrainings() {
  if (!options_.blobs) return;  // no training without blobs (Submit refuses it)
  driver_->Step();
}

void Coordinator::WakeDriverFor(const JobId& id) {
  // A training job, or one of its rounds ("<job>.r3").
  auto dot = id.find('.');
  if (!trainings_.count(dot == std::string::npos ? id : id.substr(0, dot))) return;
  {
    std::lock_guard lock(driver_mu_);
    driver_wake_ = true;
  }
  driver_cv_.notify_one();
}

Result<std::pair<v1::JobInfo, std::vector<RoundRecord>>> Coordinator::TrainingRounds(
    const JobId& id, const UserRecord& caller) {
  v1::JobInfo info;
  {
    MutexLock lock(mu_);
    auto v = VisibleJob(id, caller);
    if (!v.ok()) return v.status();
    info = InfoOf(*v);
  }
  const App* app = apps_->Find(info.app());
  if (!app || !app->Driven()) {
    return InvalidArgument("job " + id + " is a " + info.app() + " job, which has no rounds");
  }
  auto rounds = store_->Rounds(id);
  if (!rounds.ok()) return rounds.status();
  return std::make_pair(std::move(info), std::move(rounds).value());
}

std::vector<JobRecord> Coordinator::RunningTrainings() {
  MutexLock lock(mu_);
  std::vector<JobRecord> out;
  for (const JobId& id : trainings_) {
    if (auto v = sched_.GetJob(id); v && v->record.state == JobState::kRunning) {
      out.push_back(std::move(v->record));
    }
  }
  return out;
}

std::optional<JobView> Coordinator::Job(const JobId& id) {
  MutexLock lock(mu_);
  return sched_.GetJob(id);
}

Status Coordinator::SubmitRound(const JobId& id, const std::string& owner,
                                const std::string& spec_json) {
  auto planned = ParseAndPlanJob(spec_json, *apps_);
  if (!planned.ok()) return planned.status();
  MutexLock lock(mu_);
  if (sched_.GetJob(id)) return Status::Ok();
  // Not for a training job that ended meanwhile (cancelled while its last
  // round was being aggregated).
  if (!trainings_.count(id.substr(0, id.find('.')))) {
    return FailedPrecondition("job " + id.substr(0, id.find('.')) + " is no longer running");
  }
  Time now = clock_->Now();
  CLAW_RETURN_IF_ERROR(sched_.AddJob(id, owner, std::move(planned).value(), now));
  CommitAndNotify(now);
  log_->info("round submitted job={}", id);
  return Status::Ok();
}

Result<std::vector<RoundRecord>> Coordinator::Rounds(const JobId& job) {
  return store_->Rounds(job);
}

Status Coordinator::EndTraining(const JobId& id, JobState state, std::string result_json,
                                std::string error) {
  MutexLock lock(mu_);
  Time now = clock_->Now();
  Status st = sched_.EndJob(id, state, std::move(result_json), error, now);
  trainings_.erase(id);
  if (!st.ok()) return st;
  CommitAndNotify(now);
  if (state == JobState::kDone) {
    log_->info("training done job={}", id);
  } else {
    log_->warn("training failed job={} error={}", id, error);
  }
  return Status::Ok();
}

void Coordinator::WrongAnswer(const AgentId& agent) {
  MutexLock lock(mu_);
  Time now = clock_->Now();
  sched_.CountWrongAnswer(agent, now);
  CommitAndNotify(now);
  log_->warn("delta refused agent={}", agent);
}

void Coordinator::SendSecAgg(std::vector<rounds::SecAggSend> sends) {
  if (sends.empty()) return;
  MutexLock lock(mu_);
  for (rounds::SecAggSend& s : sends) {
    auto it = session_of_.find(s.agent);
    if (it == session_of_.end()) continue;  // gone: the round counts it as vanished
    v1::CoordinatorMessage m;
    v1::SecAggDown* d = m.add_secagg();
    d->set_handle(s.handle);
    d->set_step(static_cast<uint32_t>(s.step));
    d->set_error(s.error);
    if (s.roster) {
      const secagg::Params& p = s.roster->params;
      d->set_session(s.roster->session);
      d->set_neighbours(p.neighbours);
      d->set_threshold(p.threshold);
      d->set_min_survivors(p.min_survivors);
      d->set_bits(static_cast<uint32_t>(p.bits));
      d->set_length(p.length);
      d->set_levels(secagg::kLevels);
      if (s.step == 1) {
        for (const secagg::Advertisement& a : s.roster->members) {
          v1::SecAggMember* mm = d->add_members();
          mm->set_id(a.id);
          mm->set_c_pk(a.c_pk);
          mm->set_s_pk(a.s_pk);
          mm->set_commit(a.commit);
        }
      }
    }
    for (const secagg::SealedShare& sh : s.shares) {
      v1::SecAggSealed* out = d->add_shares();
      out->set_from(sh.from);
      out->set_to(sh.to);
      out->set_box(sh.box);
    }
    for (secagg::DeviceId id : s.masked) d->add_masked(id);
    it->second->Send(m);
    metrics_.session_sends++;
  }
}

void Coordinator::OnSecAggReplies(SessionSink* sink, const v1::AgentMessage& msg) {
  AgentId agent;
  {
    MutexLock lock(mu_);
    auto it = sessions_.find(sink);
    if (it == sessions_.end()) return;
    agent = it->second.agent;
  }
  if (!driver_) return;
  for (const v1::SecAggUp& up : msg.secagg()) {
    rounds::SecAggReply r;
    r.handle = up.handle();
    r.step = static_cast<int>(up.step());
    r.error = up.error().substr(0, 512);
    for (const auto& sh : up.shares()) r.shares.push_back({sh.from(), sh.to(), sh.box()});
    r.masked = up.masked();
    for (const auto& rv : up.revealed()) {
      if (rv.x() == 0 || rv.x() > 255) continue;  // not a share number: the server refuses the rest
      r.revealed.push_back({rv.owner(), rv.self_mask(),
                            secagg::Share{static_cast<uint8_t>(rv.x()), rv.y()}});
    }
    Status st = driver_->OnSecAgg(agent, r);
    if (!st.ok()) {
      log_->warn("secure aggregation reply refused agent={} step={}: {}", agent, r.step,
                 EscapeControl(st.message()));
    }
  }
  {
    std::lock_guard lock(driver_mu_);
    driver_wake_ = true;
  }
  driver_cv_.notify_one();
}

Status Coordinator::GrantBlob(const std::string& hash, const std::string& user) {
  return store_->AddBlobOwner(BlobOwner{hash, user});
}

}  // namespace claw

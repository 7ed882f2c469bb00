// The coordinator's side of training in rounds: what the round driver
// (rounds/driver.h) asks of it, and the driver's thread.
#include "coordinator/coordinator.h"

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

Status Coordinator::GrantBlob(const std::string& hash, const std::string& user) {
  return store_->AddBlobOwner(BlobOwner{hash, user});
}

}  // namespace claw

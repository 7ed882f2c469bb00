// The round driver: runs each training job (app `fedtrain`) as a chain of
// `fedround` jobs and turns each round's deltas into the next model
// (docs/adr/0007-training-in-rounds.md).
//
//   <job>.init    the initial model (unless the spec names one)
//   <job>.r<N>    round N: trains from model N-1; closes at its quorum or
//                 deadline; its deltas are checked, combined and applied by
//                 the outer optimizer -> model N, stored as round N
//   <job>.eval    the last model evaluated on the whole test set; then the
//                 training job ends with the curve and the model
//
// Everything it does follows from what is stored (the rounds table and the
// jobs), so a restarted coordinator goes on where it stopped: a round job
// in flight is the scheduler's to restore, a round that ended but was not
// stored is aggregated again (a deterministic function of its deltas, in
// task order), and the next round's job has a name fixed by its number.
//
// Numeric and blob work happens in Step, on the driver's thread, outside
// the coordinator's lock; the host's calls take it briefly.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/blobs.h"
#include "common/log.h"
#include "common/mutex.h"
#include "core/scheduler.h"
#include "core/types.h"
#include "rounds/secure_round.h"
#include "rounds/weights.h"

namespace claw::rounds {

struct TrainingSpec;

// What the driver needs of the coordinator.
class RoundHost {
 public:
  virtual ~RoundHost() = default;
  // Running jobs whose app is driven by this driver (fedtrain).
  virtual std::vector<JobRecord> RunningTrainings() = 0;
  virtual std::optional<JobView> Job(const JobId& id) = 0;
  // Submits a round's job under `id` for `owner`; Ok if it exists already.
  virtual Status SubmitRound(const JobId& id, const std::string& owner,
                             const std::string& spec_json) = 0;
  // Stores the round and tells the training job's watchers.
  virtual Status SaveRound(const RoundRecord& round) = 0;
  virtual Result<std::vector<RoundRecord>> Rounds(const JobId& job) = 0;
  virtual Status EndTraining(const JobId& id, JobState state, std::string result_json,
                             std::string error) = 0;
  // A delta of the agent's was refused when its round was aggregated.
  virtual void WrongAnswer(const AgentId& agent) = 0;
  // `user` may read the blob (the models the coordinator makes).
  virtual Status GrantBlob(const std::string& hash, const std::string& user) = 0;
  virtual Time Now() = 0;
  // Secure aggregation's messages, each to its device's session (dropped
  // for a device that is not connected: it counts as vanished).
  virtual void SendSecAgg(std::vector<SecAggSend> sends) = 0;
};

class RoundDriver {
 public:
  RoundDriver(RoundHost* host, const BlobDir* blobs, Logger log);
  // Moves every running training job on as far as it can go now.
  void Step() CLAW_EXCLUDES(step_mu_);
  // For the job's watchers: a line ("round 3/20 · accuracy 84.2% ...") and
  // rounds done of all, if it is a training job this driver has seen.
  struct Progress {
    std::string line;
    uint32_t done = 0, total = 0;
  };
  std::optional<Progress> ProgressOf(const JobId& job) const;
  // The round job that runs now for the training job, if any.
  std::optional<JobId> CurrentRound(const JobId& job) const;
  // A device's secure aggregation reply. InvalidArgument/NotFound when it
  // belongs to no round in progress or does not fit; nothing changes then.
  Status OnSecAgg(const AgentId& agent, const SecAggReply& reply) CLAW_EXCLUDES(secure_mu_);

 private:
  // Returns whether it changed anything (then it may go further at once).
  bool StepOne(const JobRecord& job);
  // Aggregates round `n`'s ended job into round n's record.
  // The agents whose deltas its checks refused go to `liars`, to be counted
  // once the round is stored (not again when a restart aggregates it anew).
  Result<RoundRecord> Aggregate(const JobRecord& job, const nlohmann::json& params,
                                const std::vector<RoundRecord>& rounds, const JobView& round_job,
                                std::vector<AgentId>* liars);
  // Round n by secure aggregation: none while the protocol goes on.
  std::optional<Result<RoundRecord>> SecureAggregate(const JobRecord& job, const TrainingSpec& t,
                                                     const std::vector<RoundRecord>& rounds,
                                                     const JobView& round_job)
      CLAW_EXCLUDES(secure_mu_);
  // The next model from a round's combined delta, stored; `info` completed.
  Result<RoundRecord> Publish(const JobRecord& job, const TrainingSpec& t, const RoundRecord& last,
                              const JobView& round_job, const Weights& model, const Weights& combined,
                              nlohmann::json info);
  void End(const JobId& job, JobState state, std::string result, std::string error);
  // Cancels the secure rounds of trainings no longer running (cancelled,
  // failed) and tells their devices.
  void ForgetSecureRounds(const std::set<JobId>& running) CLAW_EXCLUDES(secure_mu_);
  Result<std::string> PutBlob(const std::string& bytes, const std::string& owner);
  nlohmann::json FinalResult(const TrainingSpec& t, const std::vector<RoundRecord>& rounds,
                             const JobView& eval);
  void SetProgress(const JobId& job, Progress progress, std::optional<JobId> current);

  RoundHost* host_;
  const BlobDir* blobs_;
  Logger log_;
  Mutex step_mu_;  // one Step at a time (the driver's thread, tests)
  mutable Mutex mu_;
  std::map<JobId, Progress> progress_ CLAW_GUARDED_BY(mu_);
  std::map<JobId, JobId> current_ CLAW_GUARDED_BY(mu_);
  Mutex secure_mu_;  // replies come on sessions' threads
  struct SecurePending {
    JobId training;
    SecureRound round;
  };
  std::map<JobId, SecurePending> secure_ CLAW_GUARDED_BY(secure_mu_);  // by round job
};

}  // namespace claw::rounds

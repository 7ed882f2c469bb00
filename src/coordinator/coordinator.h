// Coordinator: job intake, scheduling and agent sessions, behind one mutex.
//
// It drives the core Scheduler and commits each step's StoreBatch to the
// Store *before* telling anyone (agents, clients, watchers) about it. If the
// store fails, the coordinator stops the process (crash-only): a restart
// rebuilds everything from the store, so no half-applied state is ever
// served.
//
// Transport adapters (gRPC services, the HTTP API) translate wire messages
// and call in here; they see sessions and watchers through the small
// SessionSink and JobWatcher interfaces. Protobuf message types are used as
// plain data; no gRPC type crosses this interface.
//
// Thread-safe: every public method may be called from any thread. Sinks and
// watchers are called with the coordinator's mutex held and must not call
// back into it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "claw.pb.h"
#include "common/blobs.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/status.h"
#include "core/app.h"
#include "core/credits.h"
#include "core/quota.h"
#include "core/scheduler.h"
#include "coordinator/notifier.h"
#include "coordinator/timeline.h"
#include "ledger/ledger.h"
#include "rounds/driver.h"
#include "store/store.h"

namespace claw {

struct CoordinatorOptions {
  // Ed25519 secret key (64 bytes) that signs assignments. Required.
  std::string signing_key;
  // Where blobs (job inputs, task output files) are kept. Null: jobs that
  // name blobs are refused.
  const BlobDir* blobs = nullptr;
  uint64_t max_blob_bytes = 4ULL << 30;
  SchedulerOptions scheduler;
  // Keep the dashboard's per-task timeline (TaskTimeline). Off only to
  // measure what it costs (bench/network_bench timeline).
  bool task_timeline = true;
  Duration heartbeat = std::chrono::seconds(5);  // told to agents
  uint32_t max_batch = 256;                      // results per message, told to agents
  // Limits on what one agent message may carry.
  size_t max_results_per_message = 10'000;
  size_t max_output_bytes = 4 << 20;
  uint32_t max_want = 4096;
  // How far an agent's Hello timestamp may be from ours.
  Duration hello_skew = std::chrono::minutes(5);
  // Progress updates to a job's watchers are sent at most this often; a
  // change of state (done, failed, cancelled) is sent at once.
  Duration watch_interval = std::chrono::milliseconds(50);
  // Node-hours a month and fair-share weight by tier (core/quota.h).
  QuotaOptions quota;
  // Notifications (coordinator/notifier.h); a device whose session has
  // been gone this long is "offline" to its owner.
  NotifierOptions notify;
  Duration offline_after = std::chrono::minutes(2);
  // The open ledger's signing key, as a signed-note signer key
  // ("PRIVATE+KEY+origin+hash+key", ledger/note.h); its name is the log's
  // origin. Empty: a key made up for this process (tests).
  std::string ledger_key;
  // What to do when the store fails. Default: log and abort.
  std::function<void(const Status&)> on_store_failure;
};

// One agent session's downstream half, implemented by the transport.
class SessionSink {
 public:
  virtual ~SessionSink() = default;
  virtual void Send(const v1::CoordinatorMessage& msg) = 0;
  // Ends the session with an error the agent will see.
  virtual void Close(const Status& why) = 0;
};

// A client watching one job, implemented by the transport.
class JobWatcher {
 public:
  virtual ~JobWatcher() = default;
  virtual void OnJob(const v1::JobInfo& info) = 0;
};

struct CoordinatorMetrics {
  uint64_t jobs_submitted = 0;
  uint64_t results_accepted = 0;
  uint64_t results_stale = 0;
  uint64_t results_valid = 0;    // agreed with the canonical result in a vote
  uint64_t results_invalid = 0;  // disagreed
  uint64_t task_failures = 0;
  uint64_t assignments_sent = 0;
  uint64_t store_commits = 0;
  uint64_t agent_messages = 0;  // received on sessions
  uint64_t session_sends = 0;   // messages sent to agents
  uint64_t blob_bytes_to_agents = 0;    // file bytes agents downloaded (inputs, models)
  uint64_t blob_bytes_from_agents = 0;  // file bytes agents uploaded (outputs, deltas)
  size_t pending_tasks = 0;
  size_t active_leases = 0;
  size_t connected_agents = 0;
  size_t agents_working = 0;   // connected, holding tasks
  size_t agents_idle = 0;      // connected, holding none
  size_t agents_enrolled = 0;  // connected or not
  double credits_granted = 0;  // cobblestones, net of those taken back
  uint64_t ledger_entries = 0;
  size_t users_held = 0;  // over quota this month
  Scheduler::Histograms histograms;
};

class Coordinator : private rounds::RoundHost {
 public:
  // Rebuilds state from `store`. All pointers must outlive the coordinator.
  static Result<std::unique_ptr<Coordinator>> Create(Store* store, const AppRegistry* apps,
                                                     const Clock* clock,
                                                     CoordinatorOptions options, Logger log);
  ~Coordinator() override;

  // ---- agents ----
  // Creates `n` one-time enrollment tokens valid for `ttl`; returns them in
  // clear (only their hashes are stored). The agents they enroll belong to
  // `owner` (empty: unknown).
  Result<std::vector<std::string>> CreateEnrollTokens(size_t n, Duration ttl,
                                                      const std::string& owner = "");
  // Whether `token` (in clear) would enroll an agent now.
  bool EnrollTokenUsable(const std::string& token);
  // One token that enrolls a device of `caller`'s, valid for `ttl` (0: one
  // day; InvalidArgument past 30 days).
  Result<v1::CreateEnrollTokenResponse> CreateEnrollToken(const UserRecord& caller, Duration ttl);
  // PermissionDenied for a bad token; InvalidArgument for a bad key or report.
  Result<v1::EnrollResponse> Enroll(const v1::EnrollRequest& req);
  // Verifies the Hello and registers `sink` as the agent's session (closing
  // an older session of the same agent). Returns the agent id.
  Result<AgentId> OpenSession(const v1::Hello& hello, SessionSink* sink);
  // Applies one agent message. A malformed message closes the session with
  // InvalidArgument and changes nothing.
  void OnAgentMessage(SessionSink* sink, v1::AgentMessage& msg);
  // The session ended (either side). After this returns `sink` is not used.
  void CloseSession(SessionSink* sink);

  // Every enrolled agent with its reputation and whether it is connected.
  Result<std::vector<v1::AgentInfo>> ListAgents();

  // ---- users ----
  // The user an API token belongs to; Unauthenticated for an unknown one.
  Result<UserRecord> Authenticate(std::string_view token);
  // Creates a user; returns its API token, which is shown only this once.
  // InvalidArgument for a bad name or tier, AlreadyExists for a taken name.
  Result<std::string> AddUser(const std::string& name, const std::string& tier);

  // ---- clients ----
  // Every call is made as `caller`: a user sees, watches and cancels only
  // their own jobs (NotFound for others'), except an admin, who sees all.
  Result<JobId> Submit(std::string_view spec_json, const UserRecord& caller);
  Result<v1::JobInfo> GetJob(const JobId& id, const UserRecord& caller);
  std::vector<v1::JobInfo> ListJobs(size_t limit, const UserRecord& caller);
  Result<v1::JobInfo> Cancel(const JobId& id, const UserRecord& caller);
  // The job's info and merged result (empty until done).
  Result<std::pair<v1::JobInfo, std::string>> GetResults(const JobId& id,
                                                          const UserRecord& caller);
  // A training job's finished rounds so far (round 0: the initial model),
  // each with its model's blob and what its info says (who reported, what
  // was refused, the previous model's accuracy, bytes): the live curve.
  Result<std::pair<v1::JobInfo, std::vector<RoundRecord>>> TrainingRounds(
      const JobId& id, const UserRecord& caller);
  // Registers a watcher: it gets the current state at once, then each change.
  Status Watch(const JobId& id, const UserRecord& caller, JobWatcher* watcher);
  void Unwatch(JobWatcher* watcher);

  // ---- blobs ----
  const BlobDir* blobs() const { return options_.blobs; }
  const Clock* clock() const { return clock_; }
  uint64_t max_blob_bytes() const { return options_.max_blob_bytes; }
  // Ok if `caller` may read the blob: an admin any, others those they
  // uploaded and those their jobs made. NotFound otherwise, exactly as for a
  // missing blob, so that a hash's existence does not leak.
  Status MayReadBlob(const std::string& hash, const UserRecord& caller);
  // Records that `caller` uploaded the blob (and so may read it and name it
  // in jobs).
  Status BlobUploaded(const std::string& hash, const UserRecord& caller);
  // Ok if the agent may read the blob: only while it holds a lease on a task
  // that names it as an input (App::TaskInputBlobs). Enrolling a device of
  // one's own gives no more than that. NotFound otherwise, as above.
  Status MayAgentReadBlob(const std::string& hash, const AgentId& agent);
  // Ok if the agent may upload: only while it holds a lease (its outputs).
  // PermissionDenied otherwise.
  Status MayAgentWriteBlob(const AgentId& agent);
  // Counts file bytes that agents moved (the blob service's), for /metrics.
  void CountAgentBlobBytes(uint64_t to_agents, uint64_t from_agents) {
    blob_to_agents_ += to_agents;
    blob_from_agents_ += from_agents;
  }
  // Checks an agent's blob call: a known agent, a fresh timestamp, and its
  // signature of BlobCallMessage. PermissionDenied if not.
  Status AuthenticateAgentBlobCall(const std::string& agent_id, int64_t unix_ms,
                                   std::string_view signature, const std::string& hash);

  // ---- time ----
  // Expires leases and re-issues orphaned work. Call often (every ~100 ms).
  void Tick();

  CoordinatorMetrics Metrics();

  // ---- credits and the open ledger (bookkeeping.cc) ----
  const ledger::Ledger& ledger() const { return *ledger_; }
  // Entries [begin, end) of the ledger, at most 1,000; InvalidArgument for
  // an empty or reversed range, or one past the log's end.
  Result<std::vector<LedgerEntry>> LedgerEntries(uint64_t begin, uint64_t end);
  // Every agent's credit account as it stands now (RAC decayed to now).
  std::map<AgentId, CreditAccount> CreditAccounts();
  // Credit per agent and UTC day over the last `days` days (up to 366).
  Result<std::vector<CreditDay>> CreditHistory(int days);

  // ---- notifications (notifications.cc) ----
  // The caller's targets; Add returns the new one with its signing secret
  // (shown this once). Errors as Notifier's.
  Result<NotifyTarget> AddNotifyTarget(const std::string& kind, const std::string& url,
                                       const UserRecord& caller);
  std::vector<NotifyTarget> NotifyTargets(const UserRecord& caller);
  Status RemoveNotifyTarget(int64_t id, const UserRecord& caller);

  // ---- quotas (bookkeeping.cc) ----
  // This month's use against each tier's node-hours: all users for an
  // admin, the caller's own row otherwise.
  std::vector<UserUsage> Usage(const UserRecord& caller);
  int32_t UsageMonth();
  // Admin only (PermissionDenied otherwise; InvalidArgument for an unknown
  // tier, NotFound for an unknown user). Holds or releases their jobs as the
  // new tier's quota says.
  Status SetTier(const std::string& user, const std::string& tier, const UserRecord& caller);

  // ---- the dashboard's views (dashboard_views.cc), as JSON (docs/dashboard.md) ----
  // The network now: devices by state, FLOPS available, queue.
  HistorySample NetworkNow();
  nlohmann::json NetworkJson(const HistorySample& now);
  // The caller's devices (an admin: every device).
  Result<nlohmann::json> Devices(const UserRecord& caller);
  // The caller's page: devices, credit, rank, usage.
  Result<nlohmann::json> Me(const UserRecord& caller);
  // A job's page: info, timeline, result, rounds.
  Result<nlohmann::json> JobPage(const JobId& id, const UserRecord& caller);
  // Whether `user` is an admin now (a tier may change while a page is open).
  bool IsAdmin(const std::string& user);
  // The network's history (the store's), for the dashboard's charts.
  Status AddHistory(const HistorySample& sample, Time keep_from) {
    return store_->AddHistory(sample, keep_from);
  }
  Result<std::vector<HistorySample>> History(Time since) { return store_->History(since); }
  // Tells the caller's device to "pause", "finish" or "resume" (PermissionDenied:
  // not theirs; FailedPrecondition: offline; InvalidArgument: another action).
  Result<nlohmann::json> ControlDevice(const AgentId& agent, const std::string& action,
                                       const UserRecord& caller);

  // Moves training jobs on (the round driver, rounds/driver.h): done by a
  // thread of the coordinator's own every ~100 ms and when a round ends;
  // tests may call it directly.
  void StepTrainings();

 private:
  // ---- rounds::RoundHost (training.cc) ----
  std::vector<JobRecord> RunningTrainings() override;
  std::optional<JobView> Job(const JobId& id) override;
  Status SubmitRound(const JobId& id, const std::string& owner,
                     const std::string& spec_json) override;
  Status SaveRound(const RoundRecord& round) override;
  Result<std::vector<RoundRecord>> Rounds(const JobId& job) override;
  Status EndTraining(const JobId& id, JobState state, std::string result_json,
                     std::string error) override;
  void WrongAnswer(const AgentId& agent) override;
  Status GrantBlob(const std::string& hash, const std::string& user) override;
  Time Now() override { return clock_->Now(); }
  void SendSecAgg(std::vector<rounds::SecAggSend> sends) override CLAW_EXCLUDES(mu_);
  // A device's secure aggregation replies, for the round driver.
  void OnSecAggReplies(SessionSink* sink, const v1::AgentMessage& msg) CLAW_EXCLUDES(mu_);
  void StartDriver();
  void DriverLoop();
  // Wakes the driver when a job it drives or a round of it changed.
  void WakeDriverFor(const JobId& id) CLAW_REQUIRES(mu_);

  Coordinator(Store* store, const AppRegistry* apps, const Clock* clock,
              CoordinatorOptions options, Logger log);
  struct Session {
    AgentId agent;
    SessionSink* sink;
  };
  // Dispatches, commits the batch, then sends what the step produced.
  // `acks` are appended to the message for `ack_to`.
  void CommitAndNotify(Time now, SessionSink* ack_to = nullptr, std::vector<LeaseId> acks = {})
      CLAW_REQUIRES(mu_);
  // Tells the job's watchers about it now, or marks it to be told by a later
  // Tick when the last update was less than watch_interval ago.
  void NotifyWatchers(const JobId& id, Time now, bool force) CLAW_REQUIRES(mu_);
  // Turns the batch's credit grants into account changes and ledger
  // entries, for the same transaction (bookkeeping.cc).
  void Bookkeep(StoreBatch& batch, Time now) CLAW_REQUIRES(mu_);
  // Commits the batch: the store, then the ledger's tree. On a store
  // failure, options_.on_store_failure and false.
  bool ApplyBatch(StoreBatch& batch, Time now) CLAW_REQUIRES(mu_);
  // Loads credit accounts, the ledger's entries, users' tiers and this
  // month's usage from the store.
  Status LoadBookkeeping() CLAW_REQUIRES(mu_);
  // Holds or releases users' jobs in the scheduler as quota events say.
  void ApplyQuotaEvents(const std::vector<QuotaEvent>& events) CLAW_REQUIRES(mu_);
  // Tells owners about jobs that ended in `batch` (notifications.cc).
  void NotifyJobsEnded(const StoreBatch& batch) CLAW_REQUIRES(mu_);
  // Tells owners about devices gone longer than offline_after.
  void NotifyOfflineDevices(Time now) CLAW_REQUIRES(mu_);
  void Tell(const std::string& user, const std::string& type, std::string text,
            nlohmann::json data) CLAW_REQUIRES(mu_);
  Status ValidateAgentMessage(const v1::AgentMessage& msg) const;
  // Turns results whose output files the coordinator does not hold into
  // failures (an output counts only with its files), and takes out those
  // the app's check refuses (App::CheckOutput), listing them in `refused`.
  // Outside mu_.
  void CheckOutputs(const std::vector<const App*>& apps, const std::vector<std::string>& params,
                    const AgentId& agent, v1::AgentMessage& msg,
                    std::vector<std::pair<LeaseId, std::string>>* refused) const;
  // The agent's enrolled key, from the cache or the store.
  Result<std::string> PublicKeyOf(const AgentId& id) CLAW_REQUIRES(mu_);
  // The job, if it exists and `caller` may see it.
  Result<JobView> VisibleJob(const JobId& id, const UserRecord& caller) const CLAW_REQUIRES(mu_);
  v1::JobInfo InfoOf(const JobView& v) const CLAW_REQUIRES(mu_);

  Store* store_;
  const AppRegistry* apps_;
  const Clock* clock_;
  CoordinatorOptions options_;
  Logger log_;

  mutable Mutex mu_;
  Scheduler sched_ CLAW_GUARDED_BY(mu_);
  std::unordered_map<SessionSink*, Session> sessions_ CLAW_GUARDED_BY(mu_);
  std::unordered_map<AgentId, SessionSink*> session_of_ CLAW_GUARDED_BY(mu_);
  std::unordered_map<AgentId, std::string> public_keys_ CLAW_GUARDED_BY(mu_);  // a cache
  std::unordered_map<AgentId, v1::DeviceReport> devices_ CLAW_GUARDED_BY(mu_);  // last hellos
  std::unordered_map<std::string, UserRecord> users_by_hash_ CLAW_GUARDED_BY(mu_);  // a cache
  std::multimap<JobId, JobWatcher*> watchers_ CLAW_GUARDED_BY(mu_);
  std::unordered_map<JobId, Time> watch_sent_ CLAW_GUARDED_BY(mu_);
  std::set<JobId> watch_pending_ CLAW_GUARDED_BY(mu_);
  CoordinatorMetrics metrics_ CLAW_GUARDED_BY(mu_);
  // Running training jobs (driven apps), for the driver.
  std::set<JobId> trainings_ CLAW_GUARDED_BY(mu_);
  CreditBook credits_ CLAW_GUARDED_BY(mu_);
  QuotaBook quota_ CLAW_GUARDED_BY(mu_);
  std::unique_ptr<Notifier> notifier_;  // thread-safe
  std::unordered_map<AgentId, std::string> agent_owners_ CLAW_GUARDED_BY(mu_);
  std::map<AgentId, Time> offline_since_ CLAW_GUARDED_BY(mu_);  // owned devices gone
  std::unique_ptr<ledger::Ledger> ledger_;  // thread-safe; written under mu_
  std::set<std::pair<JobId, uint32_t>> rounds_logged_ CLAW_GUARDED_BY(mu_);
  TaskTimeline timeline_ CLAW_GUARDED_BY(mu_);
  // What each connected agent last said of its availability (AgentStatus).
  std::unordered_map<AgentId, v1::AgentStatus> agent_status_ CLAW_GUARDED_BY(mu_);

  std::atomic<uint64_t> blob_to_agents_{0}, blob_from_agents_{0};
  std::atomic<size_t> enrolled_agents_{0};  // for /metrics, without a store read per scrape
  std::unique_ptr<rounds::RoundDriver> driver_;
  std::mutex driver_mu_;
  std::condition_variable driver_cv_;
  bool driver_wake_ = false;  // guarded by driver_mu_
  bool driver_stop_ = false;  // guarded by driver_mu_
  std::thread driver_thread_;
};

// The caller of every client call in --insecure-local mode.
UserRecord LocalUser();
inline constexpr const char* kAdminTier = "admin";

// The JSON form of a job's info, as the HTTP API and `--json` print it.
nlohmann::json JobInfoToJson(const v1::JobInfo& info);
nlohmann::json AgentInfoToJson(const v1::AgentInfo& info);

}  // namespace claw

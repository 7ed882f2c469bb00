// Agent: the light process on each device.
//
// It enrolls once (one-time token -> agent id; its Ed25519 key stays in the
// state dir), then keeps one session to the coordinator: it asks for as many
// tasks as its slots (plus a small prefetch sized from observed task times)
// can take, runs them in a WorkerPool, and reports each result. Results are
// kept until the coordinator acknowledges them, and re-sent after a
// reconnect; reconnects back off exponentially with jitter.
//
// Work is taken only while the AvailabilityPolicy allows: when the owner
// comes back the workers are frozen, and after a grace period their tasks
// are handed back.
//
// Tasks of apps with files (App::HasFiles) pass through a transfer thread
// on the way in (their input blobs are fetched into <state_dir>/blobs,
// checked against their hashes, once per blob) and on the way out (their
// output blobs are uploaded before the result is reported), so that a slow
// transfer never holds up the session or other tasks.
//
// Run() blocks on the calling thread; Stop() may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "agent/availability.h"

namespace grpc {
class ChannelCredentials;
}
#include "agent/worker_pool.h"
#include "claw.pb.h"
#include "common/blobs.h"
#include "core/app.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/status.h"
#include "protocol/grpc_status.h"

namespace claw {

struct AgentOptions {
  std::string coordinator = "127.0.0.1:7450";
  std::string state_dir = "./claw-agent";  // identity.json (0600) lives here
  // One-time enrollment tokens (first start only), tried in order: the first
  // the coordinator accepts enrolls the agent, and one it refuses as used or
  // expired moves on to the next. The coordinator consumes a token
  // atomically, so agents started together on one list (--token-file) each
  // get a token of their own.
  std::vector<std::string> tokens;
  // The coordinator's CA certificate (PEM) to pin; empty: plaintext, for a
  // coordinator run with --insecure-local.
  std::string ca_pem;
  size_t slots = 0;                        // worker processes; 0: one per core
  std::string worker_executable;           // default: this executable
  // Called once from Run() when the agent is enrolled and its workers are
  // up, with a line saying who it is and which apps it offers (and why not
  // the others): `claw agent --detach` returns with it.
  std::function<void(const std::string& summary)> on_running;
  WorkerLimits limits;
  // How sandboxed commands are held together: "auto" (a cgroup where one
  // can be made), "v2", "v1", or "none" (sandbox/task_group.h).
  std::string cgroups = "auto";
  AvailabilityOptions availability;
  Duration sensor_interval = std::chrono::seconds(1);
  Duration backoff_initial = std::chrono::milliseconds(100);
  Duration backoff_max = std::chrono::seconds(10);
  // Keep this much work (in seconds per slot, judged by recent task times)
  // queued beyond the running tasks, to hide the round trip.
  double prefetch_seconds = 0.05;
  size_t max_prefetch = 256;
  size_t max_batch = 256;  // most reports per message
  // The blob cache (<state_dir>/blobs) is trimmed to this, least recently
  // used first; inputs of tasks it holds and outputs not yet uploaded are
  // kept.
  uint64_t cache_bytes = 10ULL << 30;
  // Reports wait up to this long to travel together, unless the local queue
  // is about to run dry (then they go at once, with the request for more).
  Duration coalesce = std::chrono::milliseconds(20);
  // Local datasets by name: directories that training jobs naming them read
  // here (the agent offers "dataset:<name>"); their files never leave.
  std::map<std::string, std::string> datasets;
  // Lie on purpose (benchmarks, fault tests): RunContext::misbehave.
  std::string misbehave;
};

struct AgentIdentity {
  std::string agent_id;
  std::string public_key;
  std::string secret_key;
  std::string coordinator_key;  // verifies assignments
};

// Measures one core's floating-point rate (multiply-adds) for ~`ms`.
double MeasureFlops(int ms = 30);

// How many tasks an agent with `slots` workers keeps on hand: one running per
// slot plus enough queued to cover `prefetch_seconds` of work at the recent
// average task time (at least 1, at most `max_prefetch`).
size_t PrefetchTarget(size_t slots, double prefetch_seconds, double avg_task_seconds,
                      size_t max_prefetch);
// The moving average of task run times that PrefetchTarget reads.
double UpdateTaskTimeAverage(double average, double task_seconds);

class Agent {
 public:
  Agent(AgentOptions options, const Clock* clock, std::unique_ptr<Sensors> sensors, Logger log);
  ~Agent();

  // Enrolls if needed, then serves until Stop(). Returns an error only when
  // it cannot go on (no identity and no valid token; the coordinator does
  // not know this agent).
  Status Run();
  void Stop();

  const std::string& agent_id() const { return identity_.agent_id; }
  std::vector<pid_t> WorkerPids() const { return pool_ ? pool_->WorkerPids() : std::vector<pid_t>{}; }

 private:
  struct Report;
  struct Event;
  class Session;

  // A task or result waiting for blob transfers.
  struct Transfer {
    std::vector<v1::WorkerTask> tasks;  // fetch their inputs, then run them
    std::optional<TaskOutcome> outcome;  // upload its outputs, then report it
    const App* app = nullptr;            // the outcome's
  };

  Status LoadOrEnroll();
  // The owner's control socket (agent_control.cc).
  Status StartControl();
  void StopControl();
  void ControlLoop();
  // Applies what the owner asked for to the availability policy; a
  // finishing agent that holds nothing more pauses. Run() thread.
  void ApplyOwnerControl();
  // Refreshes the status the control socket answers with. Run() thread.
  void UpdateStatus();
  // Input blobs of tasks the agent holds stay in the cache until the task
  // is done with (any thread).
  void Pin(uint64_t lease, std::vector<std::string> hashes);
  void Unpin(uint64_t lease);
  bool Pinned(std::string_view hash);
  // Pins what secagg_ holds now (after it began, answered or forgot a round).
  void PinSecAggDeltas();
  // Forgets that the lease's task has files, and unpins its inputs.
  void ForgetFiles(uint64_t lease);
  void TransferLoop();
  // Hands tasks to the pool, or back to the coordinator when away.
  void Dispatch(std::vector<v1::WorkerTask> tasks);
  void AddReport(uint64_t lease, Report report);
  v1::DeviceReport Device() const;
  // Why a session ended, and whether it had got as far as exchanging work
  // (then the next attempt starts with the shortest backoff).
  struct SessionEnd {
    Status why;
    bool was_up = false;
  };
  SessionEnd ServeSession(Session& s);
  Transport transport() const { return options_.ca_pem.empty() ? Transport::kPlaintext : Transport::kTls; }
  std::shared_ptr<grpc::ChannelCredentials> Credentials() const;
  void Handle(Event& e, Session& s);
  bool Flush(Session& s);
  void CheckAvailability(Session& s);
  void Post(Event e);

  AgentOptions options_;
  const Clock* clock_;
  std::unique_ptr<Sensors> sensors_;
  Logger log_;
  AgentIdentity identity_;
  AvailabilityPolicy policy_;
  double flops_ = 0;
  size_t slots_ = 1;
  std::unique_ptr<WorkerPool> pool_;
  AppRegistry apps_;
  std::vector<std::string> runnable_apps_;  // offered to the coordinator (Device)
  std::unique_ptr<BlobDir> blobs_;
  std::unique_ptr<class SecAggDevice> secagg_;  // rounds this device masks (agent/secagg_device.h)

  std::thread transfer_thread_;
  std::condition_variable_any transfer_cv_;

  std::atomic<bool> stop_{false};
  std::atomic<int> control_{0};  // OwnerControl, as the owner last asked
  // What the coordinator last heard of our availability (AgentStatus);
  // sent again when it changes. Run() thread.
  std::string status_sent_;
  int control_fd_ = -1;
  std::atomic<bool> control_stop_{false};
  std::thread control_thread_;
  Mutex status_mu_;
  std::string status_json_ CLAW_GUARDED_BY(status_mu_) = "{}";
  Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Transfer> transfers_ CLAW_GUARDED_BY(mu_);
  std::deque<Event> events_ CLAW_GUARDED_BY(mu_);
  Session* active_ CLAW_GUARDED_BY(mu_) = nullptr;  // for Stop to cancel it
  Mutex pins_mu_;
  std::unordered_map<uint64_t, std::vector<std::string>> pins_by_lease_ CLAW_GUARDED_BY(pins_mu_);
  std::unordered_map<std::string, int> pins_ CLAW_GUARDED_BY(pins_mu_);
  // The deltas secure aggregation holds until their rounds' sums.
  std::unordered_set<std::string> secagg_pins_ CLAW_GUARDED_BY(pins_mu_);

  // Owned by the Run() thread.
  std::map<uint64_t, Report> unacked_;  // reports not yet acknowledged
  std::deque<uint64_t> outbox_;         // reports not yet sent on this session
  size_t requested_ = 0;                // asked for, not yet received
  bool withdraw_ = false;
  double avg_task_s_ = 0;               // moving average of task run times
  Duration heartbeat_ = std::chrono::seconds(5);
  Time last_send_;
  Time last_renewal_;  // when running leases were last listed for renewal
  Time next_sensor_read_;
  std::optional<Time> first_unsent_;  // when the oldest unsent report was made
  std::unordered_map<uint64_t, const App*> with_files_;  // running leases of apps with files
  std::unordered_set<uint64_t> staging_;    // waiting for their input blobs
  std::unordered_set<uint64_t> uploading_;  // results waiting for their output blobs
};

}  // namespace claw

#include "agent/agent.h"

#include "agent/secagg_device.h"
#include "rounds/round_app.h"

#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "claw.grpc.pb.h"
#include "common/crypto.h"
#include "agent/agent_events.h"
#include "apps/registry.h"
#include "sandbox/sandbox.h"
#include "sandbox/scratch.h"
#include "sandbox/task_group.h"
#include "common/files.h"
#include "common/text.h"
#include "protocol/blob_client.h"
#include "protocol/grpc_status.h"
#include "protocol/signing.h"

namespace claw {
// One session stream and the thread that reads it.
class Agent::Session {
 public:
  Session(std::shared_ptr<grpc::Channel> channel, Agent* agent)
      : stub_(v1::AgentService::NewStub(channel)), agent_(agent) {}
  ~Session() {
    ctx_.TryCancel();
    if (reader_.joinable()) reader_.join();
  }
  bool Open(const v1::AgentMessage& hello) {
    stream_ = stub_->Session(&ctx_);
    if (!stream_->Write(hello)) return false;
    reader_ = std::thread([this] {
      Event e{Event::Kind::kMessage, {}, {}};
      while (stream_->Read(&e.msg)) {
        agent_->Post(std::move(e));
        e = Event{Event::Kind::kMessage, {}, {}};
      }
      read_ended_ = true;
      agent_->Post(Event{Event::Kind::kStreamEnded, {}, {}});
    });
    return true;
  }
  bool Write(const v1::AgentMessage& m) { return !broken_ && (broken_ = !stream_->Write(m), !broken_); }
  // Ends the call and returns its status: the coordinator's, when it ended
  // the stream; CANCELLED when this side did.
  grpc::Status Finish() {
    if (!read_ended_) ctx_.TryCancel();  // unblocks the reader
    if (reader_.joinable()) reader_.join();
    return stream_ ? stream_->Finish() : grpc::Status::CANCELLED;
  }
  void Cancel() { ctx_.TryCancel(); }
  bool ended = false;

 private:
  std::unique_ptr<v1::AgentService::Stub> stub_;
  Agent* agent_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::CoordinatorMessage>> stream_;
  std::thread reader_;
  std::atomic<bool> read_ended_{false};
  bool broken_ = false;
};

std::shared_ptr<grpc::ChannelCredentials> Agent::Credentials() const {
  if (options_.ca_pem.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = options_.ca_pem;  // only our coordinator's CA is trusted
  return grpc::SslCredentials(ssl);
}

double MeasureFlops(int ms) {
  double a[8] = {1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7};
  const double b = 0.999999, c = 1e-7;
  uint64_t iters = 0;
  Stopwatch w;
  while (w.Micros() < ms * 1000) {
    for (int k = 0; k < 100'000; ++k) {
      for (double& x : a) x = x * b + c;
    }
    iters += 100'000;
  }
  volatile double sink = a[0] + a[7];
  (void)sink;
  return static_cast<double>(iters) * 16.0 / w.Seconds();
}

Agent::Agent(AgentOptions options, const Clock* clock, std::unique_ptr<Sensors> sensors,
             Logger log)
    : options_(std::move(options)),
      clock_(clock),
      sensors_(std::move(sensors)),
      log_(std::move(log)),
      policy_(options_.availability),
      apps_(BuiltinApps()) {
  slots_ = options_.slots ? options_.slots : std::max(1u, std::thread::hardware_concurrency());
  if (options_.worker_executable.empty()) options_.worker_executable = SelfExecutable();
}

Agent::~Agent() {
  Stop();
  if (transfer_thread_.joinable()) transfer_thread_.join();
  StopControl();
}

void Agent::Post(Event e) {
  {
    MutexLock lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_one();
}

void Agent::Stop() {
  stop_ = true;
  MutexLock lock(mu_);
  if (active_) active_->Cancel();
  cv_.notify_all();
  transfer_cv_.notify_all();
}

v1::DeviceReport Agent::Device() const {
  v1::DeviceReport d;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  d.set_hostname(host);
  utsname u;
  if (uname(&u) == 0) {
    std::string os = u.sysname;
    for (char& ch : os) ch = static_cast<char>(std::tolower(ch));
    d.set_os(os);
    d.set_arch(u.machine);
  }
  d.set_cores(std::thread::hardware_concurrency());
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) d.set_memory_bytes(static_cast<uint64_t>(pages) * page);
  d.set_flops(flops_);
  d.set_slots(static_cast<uint32_t>(slots_));
  for (const std::string& a : runnable_apps_) d.add_apps(a);
  for (const auto& [name, dir] : options_.datasets) d.add_apps("dataset:" + name);
  // A capability, not an app: this agent masks its round deltas.
  if (std::find(runnable_apps_.begin(), runnable_apps_.end(), "fedround") != runnable_apps_.end()) {
    d.add_apps(std::string(rounds::kSecAggCapability));
  }
  if (pool_) d.set_sandbox(pool_->GroupDescription().substr(0, 1024));  // the coordinator's bound
  return d;
}

// ---- identity -----------------------------------------------------------------

Status Agent::LoadOrEnroll() {
  std::error_code ec;
  std::filesystem::create_directories(options_.state_dir, ec);
  std::string path = options_.state_dir + "/identity.json";
  if (std::ifstream f(path); f) {
    auto j = nlohmann::json::parse(f, nullptr, false);
    if (j.is_object() && j.contains("agent_id") && j["agent_id"].is_string() &&
        j.contains("secret_key")) {
      identity_.agent_id = j["agent_id"].get<std::string>();
      auto key = FromHex(j["secret_key"].is_string() ? j["secret_key"].get<std::string>() : "");
      std::string secret = key.ok() ? *key : "";
      identity_.secret_key = secret;
      identity_.public_key = secret.size() == 64 ? secret.substr(32) : "";
      auto ckey = FromHex(j["coordinator_key"].is_string() ? j["coordinator_key"].get<std::string>()
                                                           : "");
      identity_.coordinator_key = ckey.ok() ? *ckey : "";
      if (identity_.public_key.size() == 32 && identity_.coordinator_key.size() == 32) {
        return Status::Ok();
      }
    }
    return InvalidArgument(path + ": unreadable identity (or from a version without the "
                                  "coordinator's key); remove it and enroll again");
  }
  if (options_.tokens.empty()) {
    return FailedPrecondition("this agent is not enrolled: pass --token (one-time token from "
                              "the coordinator's enroll-tokens file, or `claw enroll-token`)");
  }
  KeyPair kp = GenerateSigningKey();
  v1::EnrollRequest req;
  req.set_public_key(kp.public_key);
  *req.mutable_device() = Device();
  Duration backoff = options_.backoff_initial;
  size_t next_token = 0;
  while (!stop_) {
    req.set_token(options_.tokens[next_token]);
    auto channel = grpc::CreateChannel(options_.coordinator, Credentials());
    auto stub = v1::AgentService::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::EnrollResponse resp;
    grpc::Status st = stub->Enroll(&ctx, req, &resp);
    if (st.ok() && resp.coordinator_key().size() != 32) {
      return PermissionDenied("enrollment: the coordinator sent no signing key");
    }
    if (st.ok()) {
      identity_ = AgentIdentity{resp.agent_id(), kp.public_key, kp.secret_key,
                                resp.coordinator_key()};
      nlohmann::json j = {{"agent_id", resp.agent_id()},
                          {"coordinator", options_.coordinator},
                          {"coordinator_key", ToHex(resp.coordinator_key())},
                          {"secret_key", ToHex(kp.secret_key)}};
      Status saved = WriteFileAtomically(path, j.dump() + "\n", 0600);
      if (!saved.ok()) return Unavailable("cannot save the identity: " + saved.message());
      log_->info("enrolled agent={} coordinator={}", identity_.agent_id, options_.coordinator);
      return Status::Ok();
    }
    if (st.error_code() == grpc::StatusCode::PERMISSION_DENIED &&
        next_token + 1 < options_.tokens.size()) {
      ++next_token;  // used by another agent, or expired: the next one
      continue;
    }
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE &&
        st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return PermissionDenied("enrollment refused: " + st.error_message() +
                              (options_.tokens.size() > 1
                                   ? " (each of the " + std::to_string(options_.tokens.size()) +
                                         " tokens given)"
                                   : ""));
    }
    log_->warn("coordinator unreachable for enrollment: {}; retrying",
               EscapeControl(DescribeUnreachable(st, transport())));
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
  return Unavailable("stopped before enrolling");
}

// ---- the loop -------------------------------------------------------------------

size_t PrefetchTarget(size_t slots, double prefetch_seconds, double avg_task_seconds,
                      size_t max_prefetch) {
  size_t prefetch = slots;
  if (avg_task_seconds > 0) {
    // Computed in floating point and clamped there: the quotient overflows
    // size_t for very short tasks.
    double want = static_cast<double>(slots) * prefetch_seconds / avg_task_seconds;
    prefetch = static_cast<size_t>(std::clamp(want, 1.0, static_cast<double>(max_prefetch)));
  }
  return slots + prefetch;
}

double UpdateTaskTimeAverage(double average, double task_seconds) {
  // Floored at 1 µs: a run of instant tasks must not drive it to zero.
  task_seconds = std::max(task_seconds, 1e-6);
  return average == 0 ? task_seconds : 0.9 * average + 0.1 * task_seconds;
}

Status Agent::Run() {
  CLAW_RETURN_IF_ERROR(LoadOrEnroll());
  flops_ = MeasureFlops();
  WorkerPoolOptions popts;
  popts.workers = slots_;
  popts.executable = options_.worker_executable;
  popts.limits = options_.limits;
  std::string offered, missing;
  for (const std::string& name : apps_.Names()) {
    if (apps_.Find(name)->Driven()) continue;  // runs no tasks (its driver's jobs do)
    Status st = apps_.Find(name)->Runnable();
    if (st.ok()) {
      runnable_apps_.push_back(name);
      offered += (offered.empty() ? "" : ", ") + name;
    } else {
      log_->warn("app {} is not offered here: {}", name, st.message());
      missing += "\n  not " + name + ": " + st.message();
    }
  }
  blobs_ = std::make_unique<BlobDir>(options_.state_dir + "/blobs");
  CLAW_RETURN_IF_ERROR(blobs_->Init());
  popts.blob_dir = blobs_->root();
  std::error_code ec;
  auto canonical = std::filesystem::weakly_canonical(options_.state_dir, ec);
  const std::string state = ec ? options_.state_dir : canonical.string();
  if (geteuid() == 0) popts.sandbox_uid_block = SandboxUidBlock(state);
  char key[16];
  std::snprintf(key, sizeof key, "%08x", static_cast<unsigned>(std::hash<std::string>{}(state)));
  popts.group_prefix = std::string("claw-") + key;
  popts.group_mode = options_.cgroups;
  for (const auto& [name, dir] : options_.datasets) popts.datasets.push_back(name + "=" + dir);
  popts.misbehave = options_.misbehave;
  // Sandboxed tasks' scratch directories: a fresh directory of this
  // agent's own (mkdtemp: no one can have made it first) that sandbox users
  // can pass through but not list (the state directory is private), named
  // in the state directory so that the next start removes what an agent
  // killed mid-task left there.
  const std::string record = options_.state_dir + "/scratch-dir";
  if (std::ifstream f(record); f) {
    std::string old;
    std::getline(f, old);
    struct stat st;
    if (!old.empty() && lstat(old.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
        st.st_uid == geteuid() && !RemoveTree(old)) {
      log_->warn("cannot remove old scratch directories in {}", old);
    }
  }
  std::string pattern =
      (std::filesystem::temp_directory_path() / ("claw-scratch-" + std::string(key) + "-XXXXXX"))
          .string();
  if (!mkdtemp(pattern.data()) || chmod(pattern.c_str(), 0711) != 0) {
    return Unavailable("cannot make a scratch directory for tasks in " +
                       std::filesystem::temp_directory_path().string() + ": " + strerror(errno));
  }
  popts.scratch_root = pattern;
  CLAW_RETURN_IF_ERROR(WriteFileAtomically(record, popts.scratch_root + "\n", 0600));
  transfer_thread_ = std::thread([this] { TransferLoop(); });
  pool_ = std::make_unique<WorkerPool>(
      popts, [this](TaskOutcome o) { Post(Event{Event::Kind::kOutcome, {}, std::move(o)}); },
      log_);
  CLAW_RETURN_IF_ERROR(pool_->Start());
  log_->info("agent running agent={} slots={} flops_per_slot={:.3g} coordinator={}",
             identity_.agent_id, slots_, flops_, options_.coordinator);
  // What holds a sandboxed task together here, said plainly when it is
  // weaker than a cgroup.
  std::string held = pool_->GroupDescription();
  if (!pool_->GroupsBindMemory()) {
    log_->warn("sandboxed tasks: {}; scratch={}", held, popts.scratch_root);
  } else {
    log_->info("sandboxed tasks: {}; scratch={}", held, popts.scratch_root);
  }
  UpdateStatus();
  if (Status st = StartControl(); !st.ok()) {
    log_->warn("no control socket (claw agent pause/resume/status will not reach it): {}",
               st.message());
  }
  if (options_.on_running) {
    options_.on_running("agent " + identity_.agent_id + " of coordinator " + options_.coordinator +
                        ": " + std::to_string(slots_) + " slot(s); runs " + offered + missing +
                        (held.empty() ? "" : "\n  sandboxed tasks: " + held));
  }

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  std::mt19937_64 jitter(std::random_device{}());
  Duration backoff = options_.backoff_initial;
  Status result = Status::Ok();
  while (!stop_) {
    auto channel = grpc::CreateCustomChannel(options_.coordinator, Credentials(), args);
    Session session(channel, this);
    {
      MutexLock lock(mu_);
      active_ = &session;
    }
    SessionEnd end = ServeSession(session);
    const Status& st = end.why;
    {
      MutexLock lock(mu_);
      active_ = nullptr;
    }
    if (st.code() == StatusCode::kPermissionDenied) {
      result = st;
      break;
    }
    if (stop_) break;
    if (end.was_up) backoff = options_.backoff_initial;  // retry soon
    std::uniform_real_distribution<double> spread(0.5, 1.5);
    auto wait = Duration(static_cast<int64_t>(static_cast<double>(backoff.count()) * spread(jitter)));
    log_->warn("session lost: {}; reconnecting in {} ms", EscapeControl(st.message()),
               wait.count() / 1000);
    MutexLock lock(mu_);
    cv_.wait_for(lock, wait, [this] { return stop_.load(); });
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
  StopControl();
  pool_.reset();
  GroupMode mode = GroupMode::kAuto;
  ParseGroupMode(options_.cgroups, &mode);
  for (size_t i = 0; i < slots_; ++i) {
    RemoveTaskGroup(popts.group_prefix + "/slot-" + std::to_string(i), mode);
  }
  RemoveTree(popts.scratch_root);
  return result;
}

Agent::SessionEnd Agent::ServeSession(Session& s) {
  v1::AgentMessage hello;
  v1::Hello* h = hello.mutable_hello();
  h->set_agent_id(identity_.agent_id);
  h->set_unix_ms(clock_->Now().unix_ms());
  h->set_signature(Sign("claw-session-v1|" + identity_.agent_id + "|" +
                            std::to_string(h->unix_ms()),
                        identity_.secret_key));
  for (uint64_t l : pool_->HeldLeases()) h->add_held_leases(l);
  for (const auto& [l, r] : unacked_) h->add_held_leases(l);
  for (uint64_t l : staging_) h->add_held_leases(l);
  for (uint64_t l : uploading_) h->add_held_leases(l);
  *h->mutable_device() = Device();
  requested_ = 0;
  withdraw_ = false;
  status_sent_.clear();
  outbox_.clear();
  for (const auto& [l, r] : unacked_) outbox_.push_back(l);  // re-send what was not acked
  if (!s.Open(hello)) {
    grpc::Status st = s.Finish();
    return {Unavailable(st.error_message().empty() ? "cannot open session"
                                                   : DescribeUnreachable(st, transport()))};
  }
  log_->info("session open coordinator={} held={}", options_.coordinator, hello.hello().held_leases_size());
  bool had_traffic = false;
  last_send_ = clock_->Now();
  next_sensor_read_ = clock_->Now();
  while (!stop_ && !s.ended) {
    std::deque<Event> batch;
    {
      Duration wait = std::chrono::milliseconds(100);
      if (first_unsent_) {
        wait = std::max(Duration(0), *first_unsent_ + options_.coalesce - clock_->Now());
      }
      MutexLock lock(mu_);
      auto until = std::chrono::steady_clock::now() + wait;
      while (events_.empty() && !stop_ &&
             cv_.wait_until(lock, until) == std::cv_status::no_timeout) {
      }
      batch.swap(events_);
    }
    for (Event& e : batch) {
      if (e.kind == Event::Kind::kMessage) had_traffic = true;
      Handle(e, s);
    }
    if (clock_->Now() >= next_sensor_read_) CheckAvailability(s);
    if (!s.ended && !Flush(s)) s.ended = true;
  }
  grpc::Status st = s.Finish();
  {
    // What the session's reader posted after the loop stopped taking events
    // (its end, a last message) belongs to this session alone: left in the
    // queue, a stale "stream ended" ended the next session at once, every
    // time, before it could ask for work.
    MutexLock lock(mu_);
    std::erase_if(events_, [](const Event& e) {
      return e.kind == Event::Kind::kMessage || e.kind == Event::Kind::kStreamEnded;
    });
  }
  if (st.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    return {PermissionDenied("coordinator refused the session: " + st.error_message())};
  }
  if (stop_) return {Status::Ok(), had_traffic};
  std::string why = st.ok()                       ? "the coordinator ended the session"
                    : st.error_message().empty() ? "connection lost (code " +
                                                       std::to_string(st.error_code()) + ")"
                                                 : DescribeUnreachable(st, transport());
  return {Unavailable(why), had_traffic};
}

void Agent::Handle(Event& e, Session& s) {
  switch (e.kind) {
    case Event::Kind::kStreamEnded:
      s.ended = true;
      return;
    case Event::Kind::kWake:
      return;
    case Event::Kind::kOutcome: {
      TaskOutcome& o = e.outcome;
      log_->debug("outcome lease={} ok={} runtime_ms={}", o.lease_id, o.ok, o.runtime_us / 1000);
      avg_task_s_ = UpdateTaskTimeAverage(avg_task_s_, static_cast<double>(o.runtime_us) / 1e6);
      if (auto f = with_files_.find(o.lease_id); f != with_files_.end()) {
        const App* app = f->second;
        ForgetFiles(o.lease_id);
        if (o.ok && app->Name() == "fedround") {
          // A round with secure aggregation: the delta stays here; the
          // output announces keys instead (docs/privacy.md).
          if (!secagg_) secagg_ = std::make_unique<SecAggDevice>(blobs_.get());
          auto masked = secagg_->Begin(std::move(o.output), clock_->Now());
          PinSecAggDeltas();  // the delta stays in the cache until its round's sum
          if (masked.ok()) {
            o.output = std::move(masked).value();
          } else {
            o.ok = false;  // never upload a delta the round wanted masked
            o.error = masked.status().message();
            o.output.clear();
          }
        }
        if (o.ok && !app->OutputBlobs(o.output).empty()) {  // upload first
          uploading_.insert(o.lease_id);
          Pin(o.lease_id, app->OutputBlobs(o.output));  // kept until uploaded
          MutexLock lock(mu_);
          transfers_.push_back(Transfer{{}, std::move(o), app});
          transfer_cv_.notify_one();
          return;
        }
      }
      AddReport(o.lease_id, Report{o.ok ? Report::Kind::kResult : Report::Kind::kFailure,
                                   o.ok ? std::move(o.output) : std::move(o.error), o.runtime_us});
      return;
    }
    case Event::Kind::kUploaded: {
      TaskOutcome& o = e.outcome;
      if (uploading_.erase(o.lease_id) == 0) return;  // cancelled meanwhile
      AddReport(o.lease_id, Report{o.ok ? Report::Kind::kResult : Report::Kind::kFailure,
                                   o.ok ? std::move(o.output) : std::move(o.error), o.runtime_us});
      return;
    }
    case Event::Kind::kStaged: {
      for (auto& [lease, why] : e.failures) {
        if (staging_.erase(lease) == 0) continue;
        ForgetFiles(lease);
        AddReport(lease, Report{Report::Kind::kFailure, std::move(why), 0});
      }
      std::vector<v1::WorkerTask> ready;
      for (auto& t : e.tasks) {
        if (staging_.erase(t.lease_id()) > 0) ready.push_back(std::move(t));
      }
      Dispatch(std::move(ready));
      return;
    }
    case Event::Kind::kMessage:
      break;
  }
  v1::CoordinatorMessage& m = e.msg;
  if (m.has_config() && m.config().heartbeat_ms() > 0) {
    heartbeat_ = std::chrono::milliseconds(m.config().heartbeat_ms());
  }
  for (uint64_t l : m.ack()) unacked_.erase(l);
  for (uint64_t l : m.cancel()) {
    pool_->Cancel(l);
    unacked_.erase(l);
    staging_.erase(l);
    uploading_.erase(l);
    ForgetFiles(l);
  }
  if (m.assignments_size() > 0 &&
      !AssignmentsVerify(identity_.agent_id, identity_.coordinator_key, m)) {
    // Not from our coordinator, or altered: run none of it.
    log_->error("refusing {} assignments: their signature does not verify with the "
                "coordinator's key",
                m.assignments_size());
    requested_ -= std::min<size_t>(requested_, m.assignments_size());
    for (const auto& a : m.assignments()) {
      unacked_[a.lease_id()] =
          Report{Report::Kind::kFailure, "assignment signature does not verify", 0};
      outbox_.push_back(a.lease_id());
    }
    if (!first_unsent_) first_unsent_ = clock_->Now();
  } else if (m.assignments_size() > 0) {
    requested_ -= std::min<size_t>(requested_, m.assignments_size());
    log_->debug("assigned {} task(s), first lease={}", m.assignments_size(),
                m.assignments(0).lease_id());
    std::vector<v1::WorkerTask> tasks;
    Transfer staging;
    tasks.reserve(m.assignments_size());
    for (auto& a : *m.mutable_assignments()) {
      v1::WorkerTask t;
      t.set_lease_id(a.lease_id());
      t.set_app(std::move(*a.mutable_app()));
      t.set_params(std::move(*a.mutable_params()));
      const App* app = apps_.Find(t.app());
      if (app && app->HasFiles()) {
        with_files_[t.lease_id()] = app;
        Pin(t.lease_id(), app->TaskInputBlobs(t.params()));
        auto fetch = app->BlobsToFetch(t.params(), *blobs_);
        if (std::any_of(fetch.begin(), fetch.end(),
                        [&](const std::string& h) { return !blobs_->Has(h); })) {
          staging_.insert(t.lease_id());
          staging.tasks.push_back(std::move(t));
          continue;
        }
      }
      tasks.push_back(std::move(t));
    }
    Dispatch(std::move(tasks));
    if (!staging.tasks.empty()) {
      MutexLock lock(mu_);
      transfers_.push_back(std::move(staging));
      transfer_cv_.notify_one();
    }
  }
  if (m.secagg_size() > 0) {
    v1::AgentMessage up;
    for (const auto& down : m.secagg()) {
      if (!secagg_) break;
      if (auto reply = secagg_->Handle(down, clock_->Now())) *up.add_secagg() = std::move(*reply);
    }
    PinSecAggDeltas();
    if (up.secagg_size() > 0 && !s.Write(up)) s.ended = true;
  }
  if (m.drain()) withdraw_ = true;
  if (!m.owner_control().empty()) {
    // The owner, from the dashboard: as `claw agent pause | finish | resume`.
    const std::string& c = m.owner_control();
    if (c == "pause" || c == "finish" || c == "resume") {
      control_ = static_cast<int>(c == "pause"    ? OwnerControl::kPaused
                                  : c == "finish" ? OwnerControl::kFinishing
                                                  : OwnerControl::kNone);
      log_->info("owner asked the agent to {} (from the dashboard)", c);
      next_sensor_read_ = clock_->Now();  // applied now, not at the next reading
    }
  }
}

void Agent::AddReport(uint64_t lease, Report report) {
  unacked_[lease] = std::move(report);
  outbox_.push_back(lease);
  if (!first_unsent_) first_unsent_ = clock_->Now();
}

void Agent::Dispatch(std::vector<v1::WorkerTask> tasks) {
  if (tasks.empty()) return;
  if (policy_.state() == Availability::kAway) {  // raced with our withdrawal
    for (const auto& t : tasks) {
      ForgetFiles(t.lease_id());
      AddReport(t.lease_id(), Report{Report::Kind::kReturned, "", 0});
    }
    return;
  }
  pool_->Submit(std::move(tasks));
}

void Agent::CheckAvailability(Session& s) {
  next_sensor_read_ = clock_->Now() + options_.sensor_interval;
  Availability before = policy_.state();
  // The sandboxes' processes are the agent's own load, not the owner's.
  std::vector<pid_t> own = pool_->OwnPids();
  own.push_back(getpid());
  SensorReadings readings = sensors_->Read(own);
  if (readings.local_hour < 0) {
    const time_t t = static_cast<time_t>(clock_->Now().unix_ms() / 1000);
    std::tm tm{};
    if (localtime_r(&t, &tm)) readings.local_hour = tm.tm_hour;
  }
  ApplyOwnerControl();
  Availability now = policy_.Update(readings, clock_->Now());
  UpdateStatus();
  if (now == before) return;
  log_->info("availability {} -> {} {}", AvailabilityName(before), AvailabilityName(now),
             policy_.reason());
  if (now == Availability::kPaused) {
    pool_->Pause();
    withdraw_ = true;
  } else if (now == Availability::kAway) {
    std::vector<uint64_t> back = pool_->TakeBackAll();
    back.insert(back.end(), staging_.begin(), staging_.end());
    staging_.clear();
    for (uint64_t l : back) {
      ForgetFiles(l);
      AddReport(l, Report{Report::Kind::kReturned, "", 0});
    }
  } else {
    pool_->Resume();
  }
}

bool Agent::Flush(Session& s) {
  Time now = clock_->Now();
  // Hold reports briefly so that several travel (and commit) together, but
  // never while the workers may run out of queued work.
  bool hold = first_unsent_ && now < *first_unsent_ + options_.coalesce &&
              outbox_.size() < options_.max_batch && !withdraw_ &&
              pool_->held() > slots_ + slots_ / 2;
  if (hold) return true;
  first_unsent_.reset();
  do {
    v1::AgentMessage m;
    size_t n = 0;
    while (!outbox_.empty() && n < options_.max_batch) {
      uint64_t l = outbox_.front();
      outbox_.pop_front();
      auto it = unacked_.find(l);
      if (it == unacked_.end()) continue;  // cancelled meanwhile
      const Report& r = it->second;
      if (r.kind == Report::Kind::kResult) {
        auto* pr = m.add_results();
        pr->set_lease_id(l);
        pr->set_output(r.output_or_reason);
        pr->set_runtime_us(r.runtime_us);
      } else if (r.kind == Report::Kind::kFailure) {
        auto* pf = m.add_failures();
        pf->set_lease_id(l);
        pf->set_reason(r.output_or_reason);
      } else {
        m.add_returned(l);
      }
      ++n;
    }
    if (withdraw_) {
      m.set_withdraw(true);
      requested_ = 0;
      withdraw_ = false;
    } else if (policy_.state() == Availability::kAvailable && outbox_.empty() &&
               policy_.control() != OwnerControl::kFinishing) {
      size_t have = pool_->held() + staging_.size() + requested_;
      size_t target =
          PrefetchTarget(slots_, options_.prefetch_seconds, avg_task_s_, options_.max_prefetch);
      if (have < target) {
        m.set_want(static_cast<uint32_t>(target - have));
        requested_ += target - have;
      }
    }
    if (n == 0 || status_sent_.empty()) {
      v1::AgentStatus st;
      st.set_availability(AvailabilityName(policy_.state()));
      st.set_control(OwnerControlName(policy_.control()));
      st.set_why(policy_.reason().substr(0, 400));
      std::string key = st.availability() + "|" + st.control() + "|" + st.why();
      if (key != status_sent_) {
        *m.mutable_status() = std::move(st);
        status_sent_ = std::move(key);
      }
    }
    bool content = n > 0 || m.want() > 0 || m.withdraw() || m.has_status();
    if (!content && now - last_send_ >= heartbeat_) {
      m.set_heartbeat(true);
      content = true;
    }
    // About every heartbeat, the leases still being worked on: a task
    // longer than its lease keeps it by these.
    if (now - last_renewal_ >= heartbeat_) {
      for (uint64_t l : pool_->HeldLeases()) m.add_running(l);
      for (uint64_t l : pool_->RunningLeases()) m.add_started(l);
      for (uint64_t l : staging_) m.add_running(l);
      for (uint64_t l : uploading_) m.add_running(l);
      last_renewal_ = now;
      if (secagg_ && secagg_->pending() > 0) {
        secagg_->Expire(now);  // rounds it heard nothing of for too long
        PinSecAggDeltas();
      }
      content = content || m.running_size() > 0;
    }
    if (!content) return true;
    if (n > 0 || m.want() > 0) {
      log_->debug("send results={} failures={} want={}", m.results_size(), m.failures_size(),
                  m.want());
    }
    SignReports(identity_.agent_id, identity_.secret_key, &m);
    if (!s.Write(m)) return false;
    last_send_ = now;
  } while (!outbox_.empty());
  return true;
}

}  // namespace claw

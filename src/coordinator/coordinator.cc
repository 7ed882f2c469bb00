#include "coordinator/coordinator.h"

#include <cstdlib>
#include <unordered_set>

#include "common/crypto.h"
#include "common/text.h"
#include "core/job_spec.h"
#include "protocol/signing.h"

namespace claw {
namespace {

constexpr size_t kMaxDeviceField = 256;

std::string SessionMessage(const std::string& agent_id, int64_t unix_ms) {
  return "claw-session-v1|" + agent_id + "|" + std::to_string(unix_ms);
}

Status ValidateDevice(const v1::DeviceReport& d) {
  if (d.hostname().size() > kMaxDeviceField || d.os().size() > kMaxDeviceField ||
      d.arch().size() > kMaxDeviceField) {
    return InvalidArgument("device: hostname, os and arch must be at most 256 bytes");
  }
  if (d.cores() > 4096) return InvalidArgument("device.cores: more than 4096");
  if (d.slots() > 1024) return InvalidArgument("device.slots: more than 1024");
  if (!(d.flops() >= 0 && d.flops() < 1e18)) return InvalidArgument("device.flops: out of range");
  if (d.apps_size() > 256) return InvalidArgument("device.apps: more than 256");
  if (d.sandbox().size() > 1024) return InvalidArgument("device.sandbox: more than 1024 bytes");
  for (const auto& a : d.apps()) {
    if (a.size() > 64) return InvalidArgument("device.apps: a name longer than 64 bytes");
  }
  return Status::Ok();
}

nlohmann::json DeviceJson(const v1::DeviceReport& d) {
  return {{"hostname", d.hostname()}, {"os", d.os()},       {"arch", d.arch()},
          {"cores", d.cores()},       {"memory_bytes", d.memory_bytes()},
          {"flops", d.flops()},       {"slots", d.slots()}};
}

}  // namespace

nlohmann::json JobInfoToJson(const v1::JobInfo& i) {
  nlohmann::json j = {{"job_id", i.job_id()},
                      {"name", i.name()},
                      {"app", i.app()},
                      {"state", i.state()},
                      {"tasks_total", i.tasks_total()},
                      {"tasks_done", i.tasks_done()},
                      {"tasks_running", i.tasks_running()},
                      {"tasks_failed", i.tasks_failed()},
                      {"created_unix_ms", i.created_unix_ms()},
                      {"finished_unix_ms", i.finished_unix_ms()},
                      {"task_seconds", i.task_seconds()}};
  if (!i.error().empty()) j["error"] = i.error();
  if (!i.waiting().empty()) j["waiting"] = i.waiting();
  if (!i.owner().empty()) j["owner"] = i.owner();
  if (!i.progress().empty()) j["progress"] = i.progress();
  return j;
}

Coordinator::Coordinator(Store* store, const AppRegistry* apps, const Clock* clock,
                         CoordinatorOptions options, Logger log)
    : store_(store),
      apps_(apps),
      clock_(clock),
      options_(std::move(options)),
      log_(std::move(log)),
      sched_(apps, options_.scheduler),
      quota_(options_.quota) {
  if (!options_.on_store_failure) {
    options_.on_store_failure = [log = log_](const Status& st) {
      log->critical("store failed: {}; stopping (restart recovers from the store)",
                    st.ToString());
      log->flush();
      std::abort();
    };
  }
}

Coordinator::~Coordinator() {
  if (driver_thread_.joinable()) {
    {
      std::lock_guard lock(driver_mu_);
      driver_stop_ = true;
    }
    driver_cv_.notify_one();
    driver_thread_.join();
  }
}

Result<std::unique_ptr<Coordinator>> Coordinator::Create(Store* store, const AppRegistry* apps,
                                                         const Clock* clock,
                                                         CoordinatorOptions options, Logger log) {
  if (options.signing_key.size() != 64) {
    return InvalidArgument("coordinator signing key: must be a 64-byte Ed25519 secret key");
  }
  std::unique_ptr<Coordinator> c(new Coordinator(store, apps, clock, std::move(options), log));
  auto state = store->Load();
  if (!state.ok()) return state.status();
  size_t jobs = state->jobs.size(), leases = state->leases.size();
  MutexLock lock(c->mu_);  // nobody else has it yet; the analysis wants it held
  CLAW_RETURN_IF_ERROR(c->LoadBookkeeping());
  auto agents = store->ListAgents();  // once: /metrics counts enrollments from here on
  if (!agents.ok()) return agents.status();
  c->enrolled_agents_ = agents->size();
  c->notifier_ = std::make_unique<Notifier>(store, clock, c->options_.notify, log);
  CLAW_RETURN_IF_ERROR(c->sched_.Restore(std::move(state).value(), clock->Now()));
  // A job that finished during recovery (all results were in) is committed now.
  StoreBatch recovered = c->sched_.TakeBatch();
  c->Bookkeep(recovered, clock->Now());
  CLAW_RETURN_IF_ERROR(store->Apply(recovered));
  CLAW_RETURN_IF_ERROR(c->ledger_->Commit(recovered.ledger));
  c->sched_.TakeNotices();
  for (const JobView& v : c->sched_.ListJobs(c->sched_.job_count())) {
    if (v.record.state != JobState::kRunning) continue;
    auto spec = nlohmann::json::parse(v.record.spec_json, nullptr, false);
    const App* app = spec.is_object() ? apps->Find(spec.value("app", "")) : nullptr;
    if (app && app->Driven()) c->trainings_.insert(v.record.id);
  }
  log->info("recovered jobs={} leases={} pending_tasks={} trainings={}", jobs, leases,
            c->sched_.pending_tasks(), c->trainings_.size());
  c->StartDriver();
  return c;
}

// ---- the commit point ---------------------------------------------------------------

void Coordinator::CommitAndNotify(Time now, SessionSink* ack_to, std::vector<LeaseId> acks) {
  std::vector<AgentAssignments> assigned = sched_.Dispatch(now);
  StoreBatch batch = sched_.TakeBatch();
  if (!batch.empty()) {
    if (!ApplyBatch(batch, now)) return;
    metrics_.store_commits++;
    if (!batch.job_updates.empty()) NotifyJobsEnded(batch);
    for (const auto& v : batch.verdicts) {
      if (v.verdict == Verdict::kValid) metrics_.results_valid++;
      if (v.verdict == Verdict::kInvalid) metrics_.results_invalid++;
    }
  }
  // Only now, with the changes durable, does anyone hear of them.
  Notices notices = sched_.TakeNotices();
  std::unordered_map<SessionSink*, v1::CoordinatorMessage> out;
  for (auto& aa : assigned) {
    auto it = session_of_.find(aa.agent);
    if (it == session_of_.end()) continue;  // Dispatch only serves connected agents
    auto& msg = out[it->second];
    for (auto& a : aa.assignments) {
      v1::Assignment* pa = msg.add_assignments();
      pa->set_lease_id(a.lease);
      pa->set_job_id(std::move(a.job));
      pa->set_task_index(a.index);
      pa->set_app(std::move(a.app));
      pa->set_params(std::move(a.params));
      pa->set_deadline_unix_ms(a.deadline.unix_ms());
    }
    metrics_.assignments_sent += aa.assignments.size();
  }
  for (auto& [agent, leases] : notices.cancels) {
    auto it = session_of_.find(agent);
    if (it == session_of_.end()) continue;
    for (LeaseId l : leases) out[it->second].add_cancel(l);
  }
  if (ack_to && !acks.empty()) {
    auto& msg = out[ack_to];
    for (LeaseId l : acks) msg.add_ack(l);
  }
  for (auto& [sink, msg] : out) {
    if (msg.assignments_size() > 0) {
      SignAssignments(sessions_.at(sink).agent, options_.signing_key, &msg);
    }
    sink->Send(msg);
  }
  metrics_.session_sends += out.size();
  for (const JobId& id : notices.jobs_changed) {
    NotifyWatchers(id, now, false);
    WakeDriverFor(id);
  }
}

void Coordinator::NotifyWatchers(const JobId& id, Time now, bool force) {
  auto range = watchers_.equal_range(id);
  if (range.first == range.second) {
    watch_sent_.erase(id);
    watch_pending_.erase(id);
    return;
  }
  auto view = sched_.GetJob(id);
  if (!view) return;
  auto sent = watch_sent_.find(id);
  bool due = force || IsFinal(view->record.state) || sent == watch_sent_.end() ||
             now >= sent->second + options_.watch_interval;
  if (!due) {
    watch_pending_.insert(id);
    return;
  }
  watch_pending_.erase(id);
  if (IsFinal(view->record.state)) {
    watch_sent_.erase(id);  // it will not change again
  } else {
    watch_sent_[id] = now;
  }
  v1::JobInfo info = InfoOf(*view);
  for (auto it = range.first; it != range.second; ++it) it->second->OnJob(info);
}

// ---- agents ---------------------------------------------------------------------------

Result<std::vector<std::string>> Coordinator::CreateEnrollTokens(size_t n, Duration ttl,
                                                                 const std::string& owner) {
  std::vector<std::string> tokens, hashes;
  for (size_t i = 0; i < n; ++i) {
    tokens.push_back("ct-" + RandomHex(16));
    hashes.push_back(Blake2bHex(tokens.back()));
  }
  CLAW_RETURN_IF_ERROR(store_->AddEnrollTokens(hashes, clock_->Now() + ttl, owner));
  return tokens;
}

bool Coordinator::EnrollTokenUsable(const std::string& token) {
  auto usable = store_->EnrollTokenUsable(Blake2bHex(token), clock_->Now());
  return usable.ok() && *usable;
}

Result<v1::CreateEnrollTokenResponse> Coordinator::CreateEnrollToken(const UserRecord& caller,
                                                                     Duration ttl) {
  if (ttl > std::chrono::hours(24 * 30)) return InvalidArgument("ttl_s: at most 30 days");
  if (ttl <= Duration(0)) ttl = std::chrono::hours(24);
  Time expires = clock_->Now() + ttl;
  auto tokens = CreateEnrollTokens(1, ttl, caller.name);
  if (!tokens.ok()) return tokens.status();
  v1::CreateEnrollTokenResponse r;
  r.set_token(tokens->front());
  r.set_expires_unix_ms(expires.unix_ms());
  log_->info("enrollment token made owner={}", caller.name);
  return r;
}

Result<v1::EnrollResponse> Coordinator::Enroll(const v1::EnrollRequest& req) {
  if (req.token().empty() || req.token().size() > 256) {
    return PermissionDenied("enrollment token is missing or malformed");
  }
  if (req.public_key().size() != 32) {
    return InvalidArgument("public_key: must be a 32-byte Ed25519 key, got " +
                           std::to_string(req.public_key().size()) + " bytes");
  }
  CLAW_RETURN_IF_ERROR(ValidateDevice(req.device()));
  AgentRecord rec{"a-" + RandomHex(6), req.public_key(), DeviceJson(req.device()).dump(),
                  clock_->Now()};
  Status st = store_->EnrollAgent(Blake2bHex(req.token()), rec, rec.enrolled);
  if (!st.ok()) {
    log_->warn("enrollment refused host={} reason={}", EscapeControl(req.device().hostname()),
               st.message());
    return st;
  }
  enrolled_agents_++;
  log_->info("enrolled agent={} host={} cores={} flops={:.3g}", rec.id,
             EscapeControl(req.device().hostname()), req.device().cores(), req.device().flops());
  v1::EnrollResponse resp;
  resp.set_agent_id(rec.id);
  resp.mutable_config()->set_heartbeat_ms(
      static_cast<uint32_t>(options_.heartbeat.count() / 1000));
  resp.mutable_config()->set_max_batch(options_.max_batch);
  resp.set_coordinator_key(options_.signing_key.substr(32));
  return resp;
}

Result<AgentId> Coordinator::OpenSession(const v1::Hello& hello, SessionSink* sink) {
  if (hello.agent_id().empty() || hello.agent_id().size() > 64) {
    return InvalidArgument("hello.agent_id: missing or too long");
  }
  CLAW_RETURN_IF_ERROR(ValidateDevice(hello.device()));
  if (hello.held_leases_size() > 100'000) return InvalidArgument("hello.held_leases: too many");
  Time now = clock_->Now();
  MutexLock lock(mu_);
  auto key = PublicKeyOf(hello.agent_id());
  if (!key.ok()) return key.status();
  Duration skew = now - Time::FromUnixMs(hello.unix_ms());
  if (skew > options_.hello_skew || -skew > options_.hello_skew) {
    return PermissionDenied("hello.unix_ms: clock differs from the coordinator's by more than " +
                            std::to_string(options_.hello_skew.count() / 1'000'000) + " s");
  }
  if (!Verify(SessionMessage(hello.agent_id(), hello.unix_ms()), hello.signature(), *key)) {
    return PermissionDenied("hello.signature: does not verify with the enrolled key");
  }
  AgentId id = hello.agent_id();
  if (auto old = session_of_.find(id); old != session_of_.end()) {
    SessionSink* old_sink = old->second;
    sessions_.erase(old_sink);
    session_of_.erase(old);
    sched_.AgentDisconnected(id, now);
    old_sink->Close(FailedPrecondition("replaced by a newer session of the same agent"));
  }
  devices_[id] = hello.device();
  offline_since_.erase(id);
  sessions_[sink] = Session{id, sink};
  session_of_[id] = sink;
  std::vector<LeaseId> held(hello.held_leases().begin(), hello.held_leases().end());
  sched_.SetAgentSlots(id, hello.device().slots());
  sched_.SetAgentApps(id, {hello.device().apps().begin(), hello.device().apps().end()});
  std::vector<LeaseId> invalid = sched_.AgentConnected(id, hello.device().flops(), held, now);
  v1::CoordinatorMessage welcome;
  welcome.mutable_config()->set_heartbeat_ms(
      static_cast<uint32_t>(options_.heartbeat.count() / 1000));
  welcome.mutable_config()->set_max_batch(options_.max_batch);
  for (LeaseId l : invalid) welcome.add_cancel(l);
  sink->Send(welcome);
  CommitAndNotify(now);
  log_->info("session opened agent={} held={} dropped={}", id, held.size(), invalid.size());
  return id;
}

Result<std::string> Coordinator::PublicKeyOf(const AgentId& id) {
  auto key = public_keys_.find(id);
  if (key == public_keys_.end()) {
    auto rec = store_->GetAgent(id);
    if (!rec.ok()) return PermissionDenied("unknown agent " + id + "; enroll first");
    key = public_keys_.emplace(rec->id, rec->public_key).first;
    sched_.SetAgentOwner(rec->id, rec->owner);
    agent_owners_[rec->id] = rec->owner;
  }
  return key->second;
}

Status Coordinator::ValidateAgentMessage(const v1::AgentMessage& msg) const {
  if (msg.has_hello()) return InvalidArgument("hello: only allowed as the first message");
  size_t n = static_cast<size_t>(msg.results_size()) + msg.failures_size() + msg.returned_size();
  if (n > options_.max_results_per_message) {
    return InvalidArgument("message: " + std::to_string(n) + " results is more than the limit of " +
                           std::to_string(options_.max_results_per_message));
  }
  if (msg.running_size() > 100'000) return InvalidArgument("running: more than 100000 leases");
  if (msg.want() > options_.max_want) {
    return InvalidArgument("want: " + std::to_string(msg.want()) + " is more than " +
                           std::to_string(options_.max_want));
  }
  for (const auto& r : msg.results()) {
    if (r.output().size() > options_.max_output_bytes) {
      return InvalidArgument("results: output of lease " + std::to_string(r.lease_id()) +
                             " is larger than " + std::to_string(options_.max_output_bytes));
    }
  }
  for (const auto& f : msg.failures()) {
    if (f.reason().size() > 4096) return InvalidArgument("failures: reason longer than 4096");
  }
  if (msg.status().ByteSizeLong() > 1024) return InvalidArgument("status: longer than 1024 bytes");
  return Status::Ok();
}

void Coordinator::OnAgentMessage(SessionSink* sink, v1::AgentMessage& msg) {
  if (msg.secagg_size() > 0) OnSecAggReplies(sink, msg);
  Status valid = ValidateAgentMessage(msg);
  std::vector<std::pair<LeaseId, std::string>> refused;  // results the app's check refused
  // Results whose lease was unknown (or another agent's) when they were
  // checked: stale then, they must not be taken as checked if the lease is
  // granted to this agent meanwhile.
  std::unordered_set<LeaseId> unchecked;
  if (valid.ok() && HasReports(msg)) {
    // Verified outside the mutex (~44 µs); the key never changes.
    AgentId id;
    std::string key;
    std::vector<const App*> apps;     // of each result's task
    std::vector<std::string> params;  // of each result's task, for apps with files
    {
      MutexLock lock(mu_);
      auto it = sessions_.find(sink);
      if (it == sessions_.end()) return;
      id = it->second.agent;
      key = public_keys_[id];
      apps.reserve(msg.results_size());
      params.resize(msg.results_size());
      for (int i = 0; i < msg.results_size(); ++i) {
        apps.push_back(sched_.AppOfLease(msg.results(i).lease_id(), id));
        if (apps.back() && apps.back()->HasFiles()) {
          params[i] = sched_.ParamsOfLease(msg.results(i).lease_id(), id);
        } else if (!apps.back()) {
          unchecked.insert(msg.results(i).lease_id());
        }
      }
    }
    if (!ReportsVerify(id, key, msg)) {
      valid = PermissionDenied("signature: the reports do not verify with agent " + id +
                               "'s enrolled key");
    } else {
      CheckOutputs(apps, params, id, msg, &refused);
    }
  }
  MutexLock lock(mu_);
  auto it = sessions_.find(sink);
  if (it == sessions_.end()) return;  // replaced or closed meanwhile
  const AgentId agent = it->second.agent;
  metrics_.agent_messages++;
  if (!valid.ok()) {
    log_->warn("bad message agent={} error={}", agent, valid.message());
    sink->Close(valid);
    return;
  }
  Time now = clock_->Now();
  std::vector<LeaseId> acks;
  acks.reserve(msg.results_size() + msg.failures_size() + msg.returned_size());
  // Refused first: accepting the others may close the job and end these leases.
  for (const auto& [lease, why] : refused) {
    if (sched_.ResultRejected(agent, lease, why, now)) {
      metrics_.results_invalid++;
      log_->warn("result refused agent={} lease={} reason={}", agent, lease, EscapeControl(why));
    }
    acks.push_back(lease);
  }
  if (msg.results_size() > 0) {
    std::vector<ResultIn> results;
    results.reserve(msg.results_size());
    for (auto& r : *msg.mutable_results()) {
      if (options_.task_timeline) timeline_.Reported(r.lease_id(), agent, "done");
      if (unchecked.count(r.lease_id())) {
        const App* app = sched_.AppOfLease(r.lease_id(), agent);
        // Granted between the check and now: not acknowledged, so the
        // agent sends it again, and then it is checked.
        if (app && app->HasFiles()) continue;
      }
      results.push_back(ResultIn{r.lease_id(), std::move(*r.mutable_output()), r.runtime_us()});
      acks.push_back(r.lease_id());
    }
    for (ResultOutcome o : sched_.AcceptResults(agent, results, now)) {
      if (o == ResultOutcome::kAccepted) {
        metrics_.results_accepted++;
      } else {
        metrics_.results_stale++;
      }
    }
  }
  for (const auto& f : msg.failures()) {
    if (options_.task_timeline) timeline_.Reported(f.lease_id(), agent, "failed", f.reason());
    if (sched_.TaskFailed(agent, f.lease_id(), f.reason(), now)) {
      metrics_.task_failures++;
      // The reason is the task's (its stderr, for exec): escaped, one line.
      log_->info("task failed agent={} lease={} reason={}", agent, f.lease_id(),
                 EscapeControl(f.reason()));
    }
    acks.push_back(f.lease_id());
  }
  for (LeaseId l : msg.returned()) {
    if (options_.task_timeline) timeline_.Reported(l, agent, "returned");
    sched_.LeaseReturned(agent, l, now);
    acks.push_back(l);
  }
  if (msg.running_size() > 0) {
    sched_.RenewLeases(agent, {msg.running().begin(), msg.running().end()},
                       {msg.started().begin(), msg.started().end()}, now);
  }
  if (msg.has_status()) agent_status_[agent] = msg.status();
  if (msg.withdraw()) sched_.WithdrawDemand(agent);
  if (msg.want() > 0) sched_.AddDemand(agent, msg.want());
  CommitAndNotify(now, sink, std::move(acks));
}

void Coordinator::CloseSession(SessionSink* sink) {
  MutexLock lock(mu_);
  auto it = sessions_.find(sink);
  if (it == sessions_.end()) return;
  AgentId agent = it->second.agent;
  sessions_.erase(it);
  session_of_.erase(agent);
  agent_status_.erase(agent);
  sched_.AgentDisconnected(agent, clock_->Now());
  if (auto o = agent_owners_.find(agent); o != agent_owners_.end() && !o->second.empty()) {
    offline_since_[agent] = clock_->Now();
  }
  log_->info("session closed agent={}", agent);
}

void Coordinator::CheckOutputs(const std::vector<const App*>& apps,
                               const std::vector<std::string>& params, const AgentId& agent,
                               v1::AgentMessage& msg,
                               std::vector<std::pair<LeaseId, std::string>>* refused) const {
  std::vector<int> drop;  // indexes into msg.results()
  for (int i = 0; i < msg.results_size(); ++i) {
    // A stale lease (the scheduler ignores it anyway), or an app without files.
    if (!apps[i] || !apps[i]->HasFiles()) continue;
    v1::TaskResult* r = msg.mutable_results(i);
    bool missing = false;
    for (const std::string& h : apps[i]->OutputBlobs(r->output())) {
      if (!options_.blobs || !options_.blobs->Has(h)) {
        v1::TaskFailure* f = msg.add_failures();
        f->set_lease_id(r->lease_id());
        f->set_reason("output file " + h + " was not uploaded");
        missing = true;
        break;
      }
    }
    if (!missing && options_.blobs) {
      Status st = apps[i]->CheckOutput(params[i], r->mutable_output(), agent, *options_.blobs);
      if (!st.ok()) {
        refused->emplace_back(r->lease_id(), st.message());
        missing = true;
      }
    }
    if (missing) drop.push_back(i);
  }
  // Remove from the back, so earlier indexes stay valid.
  for (auto it = drop.rbegin(); it != drop.rend(); ++it) {
    msg.mutable_results()->DeleteSubrange(*it, 1);
  }
}

Result<std::vector<v1::AgentInfo>> Coordinator::ListAgents() {
  auto records = store_->ListAgents();
  if (!records.ok()) return records.status();
  MutexLock lock(mu_);
  std::vector<v1::AgentInfo> out;
  for (const AgentRecord& r : *records) {
    v1::AgentInfo& a = out.emplace_back();
    a.set_agent_id(r.id);
    auto device = nlohmann::json::parse(r.device_json, nullptr, false);
    if (auto d = devices_.find(r.id); d != devices_.end()) {
      *a.mutable_device() = d->second;  // newer than the enrollment's
    } else if (device.is_object()) {
      v1::DeviceReport* d = a.mutable_device();
      d->set_hostname(device.value("hostname", ""));
      d->set_os(device.value("os", ""));
      d->set_arch(device.value("arch", ""));
      d->set_cores(device.value("cores", 0u));
      d->set_memory_bytes(device.value("memory_bytes", uint64_t{0}));
      d->set_flops(device.value("flops", 0.0));
      d->set_slots(device.value("slots", 0u));
    }
    a.set_connected(session_of_.count(r.id) > 0);
    // The scheduler's copy is the newest; the store's is the last committed.
    Reputation rep = sched_.ReputationOf(r.id);
    if (rep.valid + rep.invalid < r.reputation.valid + r.reputation.invalid) rep = r.reputation;
    a.set_valid_results(rep.valid);
    a.set_invalid_results(rep.invalid);
    a.set_error_rate(rep.error_rate);
    a.set_on_probation(rep.error_rate >= options_.scheduler.probation_error_rate);
    a.set_enrolled_unix_ms(r.enrolled.unix_ms());
    a.set_owner(r.owner);
  }
  return out;
}

nlohmann::json AgentInfoToJson(const v1::AgentInfo& a) {
  return {{"agent_id", a.agent_id()},
          {"hostname", a.device().hostname()},
          {"os", a.device().os()},
          {"arch", a.device().arch()},
          {"cores", a.device().cores()},
          {"flops", a.device().flops()},
          {"sandbox", a.device().sandbox()},
          {"connected", a.connected()},
          {"valid_results", a.valid_results()},
          {"invalid_results", a.invalid_results()},
          {"error_rate", a.error_rate()},
          {"on_probation", a.on_probation()},
          {"enrolled_unix_ms", a.enrolled_unix_ms()}};
}

// ---- clients ------------------------------------------------------------------------------

v1::JobInfo Coordinator::InfoOf(const JobView& v) const {
  v1::JobInfo i;
  i.set_job_id(v.record.id);
  i.set_owner(v.record.owner);
  auto spec = nlohmann::json::parse(v.record.spec_json, nullptr, false);
  if (spec.is_object()) {
    i.set_name(spec.value("name", ""));
    i.set_app(spec.value("app", ""));
  }
  i.set_state(JobStateName(v.record.state));
  i.set_tasks_total(v.record.n_tasks);
  i.set_tasks_done(v.done);
  i.set_tasks_running(v.leased);
  i.set_tasks_failed(v.failed);
  i.set_created_unix_ms(v.record.created.unix_ms());
  if (IsFinal(v.record.state)) i.set_finished_unix_ms(v.record.finished.unix_ms());
  i.set_error(v.record.error);
  i.set_waiting(v.waiting);
  i.set_task_seconds(static_cast<double>(v.record.task_runtime_us) / 1e6);
  if (driver_) {
    if (auto p = driver_->ProgressOf(v.record.id)) {
      i.set_progress(p->line);
      i.set_tasks_total(p->total);
      i.set_tasks_done(p->done);
      // Why its round makes no progress (no agent has the dataset, ...).
      if (auto round = driver_->CurrentRound(v.record.id); round && i.state() == "running") {
        if (auto rv = sched_.GetJob(*round); rv && !rv->waiting.empty()) {
          i.set_waiting(*round + ": " + rv->waiting);
        }
      }
    }
  }
  return i;
}

UserRecord LocalUser() { return UserRecord{"local", kAdminTier, "", Time{}}; }

Result<UserRecord> Coordinator::Authenticate(std::string_view token) {
  if (token.empty()) return Unauthenticated("an API token is required (--api-token or CLAW_TOKEN)");
  if (token.size() > 256) return Unauthenticated("API token: malformed");
  std::string hash = Blake2bHex(token);
  {
    MutexLock lock(mu_);
    if (auto it = users_by_hash_.find(hash); it != users_by_hash_.end()) return it->second;
  }
  auto user = store_->FindUserByToken(hash);
  if (!user.ok()) return Unauthenticated("API token: unknown");
  MutexLock lock(mu_);
  users_by_hash_[hash] = *user;
  return std::move(user).value();
}

Result<std::string> Coordinator::AddUser(const std::string& name, const std::string& tier) {
  bool name_ok = !name.empty() && name.size() <= 32 &&
                 std::all_of(name.begin(), name.end(), [](char c) {
                   return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                          c == '_' || c == '.';
                 });
  if (!name_ok || name == "local") {
    return InvalidArgument("name: 1 to 32 of a-z 0-9 . _ - (and not 'local'), got '" + name + "'");
  }
  static const char* kTiers[] = {"free", "researcher", "professional", "enterprise", kAdminTier};
  if (std::find_if(std::begin(kTiers), std::end(kTiers),
                   [&](const char* t) { return tier == t; }) == std::end(kTiers)) {
    return InvalidArgument("tier: one of free, researcher, professional, enterprise; got '" +
                           tier + "'");
  }
  std::string token = "cu-" + RandomHex(24);
  CLAW_RETURN_IF_ERROR(store_->AddUser(UserRecord{name, tier, Blake2bHex(token), clock_->Now()}));
  {
    MutexLock lock(mu_);
    ApplyQuotaEvents(quota_.SetTier(name, tier));
    sched_.SetOwnerWeight(name, quota_.Weight(name));
  }
  log_->info("user added user={} tier={}", name, tier);
  return token;
}

Result<JobView> Coordinator::VisibleJob(const JobId& id, const UserRecord& caller) const {
  auto v = sched_.GetJob(id);
  // Someone else's job is reported exactly like a missing one.
  if (!v || (caller.tier != kAdminTier && v->record.owner != caller.name)) {
    return NotFound("no job '" + id + "'");
  }
  return std::move(v).value();
}

Result<JobId> Coordinator::Submit(std::string_view spec_json, const UserRecord& caller) {
  const std::string& owner = caller.name;
  // Parse and plan outside the lock: it can be the expensive part.
  auto planned = ParseAndPlanJob(spec_json, *apps_);
  if (!planned.ok()) return planned.status();
  const App* app = apps_->Find(planned->spec.app);
  if (app->InternalOnly()) {
    return InvalidArgument("spec.app: " + planned->spec.app +
                           " jobs are the coordinator's own (a fedtrain job's rounds)");
  }
  if (app->Driven() && !options_.blobs) {
    return FailedPrecondition("this coordinator keeps no blobs, which " + planned->spec.app +
                              " jobs need");
  }
  // A job may name only files its submitter uploaded (or could read).
  for (const std::string& h : apps_->Find(planned->spec.app)->SpecInputBlobs(planned->spec)) {
    if (!MayReadBlob(h, caller).ok()) {
      return InvalidArgument("params.inputs: no blob " + h + " uploaded by " + owner +
                             " (upload it first: claw submit --input FILE does)");
    }
  }
  MutexLock lock(mu_);
  Time now = clock_->Now();
  JobId id;
  do {
    id = "j-" + RandomHex(5);
  } while (sched_.GetJob(id));
  CLAW_RETURN_IF_ERROR(sched_.AddJob(id, owner, std::move(planned).value(), now));
  if (app->Driven()) trainings_.insert(id);
  metrics_.jobs_submitted++;
  CommitAndNotify(now);
  log_->info("job submitted job={} owner={}", id, owner);
  return id;
}

Result<v1::JobInfo> Coordinator::GetJob(const JobId& id, const UserRecord& caller) {
  MutexLock lock(mu_);
  auto v = VisibleJob(id, caller);
  if (!v.ok()) return v.status();
  return InfoOf(*v);
}

std::vector<v1::JobInfo> Coordinator::ListJobs(size_t limit, const UserRecord& caller) {
  MutexLock lock(mu_);
  std::vector<v1::JobInfo> out;
  // Most recent first, only the caller's (an admin's: all), without the
  // rounds of training jobs (`claw status JOB.r3` shows one).
  for (const auto& v : sched_.ListJobs(sched_.job_count())) {
    if (out.size() >= limit) break;
    if (caller.tier != kAdminTier && v.record.owner != caller.name) continue;
    v1::JobInfo info = InfoOf(v);
    const App* app = apps_->Find(info.app());
    if (app && app->InternalOnly()) continue;
    out.push_back(std::move(info));
  }
  return out;
}

Result<v1::JobInfo> Coordinator::Cancel(const JobId& id, const UserRecord& caller) {
  MutexLock lock(mu_);
  if (auto v = VisibleJob(id, caller); !v.ok()) return v.status();
  Time now = clock_->Now();
  CLAW_RETURN_IF_ERROR(sched_.CancelJob(id, now));
  if (trainings_.erase(id) > 0) {  // and the rounds it runs now, in the same commit
    for (const JobId& round : sched_.RunningJobsUnder(id + ".")) (void)sched_.CancelJob(round, now);
  }
  CommitAndNotify(now);
  log_->info("job cancelled job={}", id);
  return InfoOf(*sched_.GetJob(id));
}

Result<std::pair<v1::JobInfo, std::string>> Coordinator::GetResults(const JobId& id,
                                                                     const UserRecord& caller) {
  MutexLock lock(mu_);
  auto v = VisibleJob(id, caller);
  if (!v.ok()) return v.status();
  return std::make_pair(InfoOf(*v), v->record.result_json);
}

Status Coordinator::Watch(const JobId& id, const UserRecord& caller, JobWatcher* watcher) {
  MutexLock lock(mu_);
  auto v = VisibleJob(id, caller);
  if (!v.ok()) return v.status();
  watchers_.emplace(id, watcher);
  watcher->OnJob(InfoOf(*v));
  return Status::Ok();
}

void Coordinator::Unwatch(JobWatcher* watcher) {
  MutexLock lock(mu_);
  std::erase_if(watchers_, [&](const auto& kv) { return kv.second == watcher; });
}

void Coordinator::Tick() {
  MutexLock lock(mu_);
  Time now = clock_->Now();
  for (const JobId& id : std::vector<JobId>(watch_pending_.begin(), watch_pending_.end())) {
    auto sent = watch_sent_.find(id);
    if (sent == watch_sent_.end() || now >= sent->second + options_.watch_interval) {
      NotifyWatchers(id, now, true);
    }
  }
  if (!offline_since_.empty()) NotifyOfflineDevices(now);
  if (auto released = quota_.Roll(now); !released.empty()) {
    ApplyQuotaEvents(released);
    CommitAndNotify(now);
  }
  auto wake = sched_.NextWakeup();
  if (!wake || *wake > now) return;
  sched_.Tick(now);
  CommitAndNotify(now);
}

CoordinatorMetrics Coordinator::Metrics() {
  MutexLock lock(mu_);
  CoordinatorMetrics m = metrics_;
  m.pending_tasks = sched_.pending_tasks();
  m.active_leases = sched_.active_leases();
  m.connected_agents = sched_.connected_agents();
  const Scheduler::AgentCounts counts = sched_.CountAgents();
  m.agents_working = counts.working;
  m.agents_idle = counts.idle;
  m.agents_enrolled = enrolled_agents_;
  m.ledger_entries = ledger_->size();
  for (const UserUsage& u : quota_.Usage()) m.users_held += u.held;
  m.histograms = sched_.histograms();
  m.blob_bytes_to_agents = blob_to_agents_.load();
  m.blob_bytes_from_agents = blob_from_agents_.load();
  return m;
}

}  // namespace claw

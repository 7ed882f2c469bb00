#include "rounds/driver.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>

#include "common/crypto.h"
#include "rounds/training_spec.h"

namespace claw::rounds {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxModelBytes = uint64_t{16} << 30;

Result<Weights> LoadWeights(const BlobDir& blobs, const std::string& hash) {
  if (hash.empty()) return Weights{};
  auto bytes = blobs.Load(hash, kMaxModelBytes);
  if (!bytes.ok()) return bytes.status();
  return ReadWeights(*bytes);
}

// {"loss", "accuracy", "count"} of a round job's summed evaluation.
json EvalOf(const json& result) {
  if (!result.contains("eval") || !result["eval"].is_object()) return nullptr;
  const json& e = result["eval"];
  double count = e.value("count", 0.0);
  if (count <= 0) return nullptr;
  return {{"loss", e.value("loss_sum", 0.0) / count},
          {"accuracy", e.value("correct", 0.0) / count},
          {"count", e.value("count", int64_t{0})}};
}

// What the stored rounds spent, for the accountant.
std::vector<RoundSpend> Spends(const std::vector<RoundRecord>& rounds) {
  std::vector<RoundSpend> out;
  for (const RoundRecord& r : rounds) {
    if (auto s = SpendOf(json::parse(r.info_json, nullptr, false))) out.push_back(std::move(*s));
  }
  return out;
}

// ε if the next round runs with every task reporting, its devices any of
// those seen so far (the worst of them) or a new one.
double ProjectedEpsilon(const TrainingSpec& t, const std::vector<RoundRecord>& rounds) {
  std::vector<RoundSpend> spends = Spends(rounds);
  RoundSpend next{t.SampleRate(), t.privacy.noise, {""}};
  for (const RoundSpend& s : spends) next.units.insert(next.units.end(), s.units.begin(), s.units.end());
  spends.push_back(std::move(next));
  return EpsilonSpent(spends, t.privacy.delta, t.PerDevicePrivacy());
}

// A round's privacy record: what it spent (with every stored round before
// it), and how. `devices`: who took part, when devices are the units.
json RoundPrivacy(const TrainingSpec& t, const std::vector<RoundRecord>& rounds, size_t units,
                  std::vector<std::string> devices, bool secure) {
  const bool per_device = t.PerDevicePrivacy();
  const double q = per_device ? 1.0 : static_cast<double>(units) / t.shards;
  std::vector<RoundSpend> spends = Spends(rounds);
  spends.push_back(RoundSpend{q, t.privacy.noise, per_device ? devices : std::vector<std::string>{}});
  json p = {{"epsilon", EpsilonSpent(spends, t.privacy.delta, per_device)},
            {"round_epsilon", EpsilonSpent({spends.back()}, t.privacy.delta, per_device)},
            {"delta", t.privacy.delta},
            {"q", q},
            {"noise_multiplier", t.privacy.noise},
            {"clip_norm", t.privacy.clip},
            {"units", units},
            {"unit", per_device ? "device" : "shard"},
            {"noise_added_by", "coordinator"},
            {"secure_aggregation", secure}};
  if (per_device) p["devices"] = std::move(devices);
  return p;
}

std::string Percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * x);
  return buf;
}

}  // namespace

RoundDriver::RoundDriver(RoundHost* host, const BlobDir* blobs, Logger log)
    : host_(host), blobs_(blobs), log_(std::move(log)) {}

void RoundDriver::Step() {
  MutexLock step(step_mu_);
  std::set<JobId> running;
  for (const JobRecord& job : host_->RunningTrainings()) {
    running.insert(job.id);
    // Each pass moves one step (submit, aggregate, end); a few at once keep
    // a restart or a quick round from waiting for the next Step.
    for (int i = 0; i < 4; ++i) {
      bool moved = false;
      try {
        moved = StepOne(job);
      } catch (const json::exception& e) {
        // Every stored output was checked when it came; this would be a
        // record that was not, and ends the training rather than the thread.
        End(job.id, JobState::kFailed, "", std::string("a stored record is malformed: ") + e.what());
      }
      if (!moved) break;
      auto v = host_->Job(job.id);
      if (!v || IsFinal(v->record.state)) {
        running.erase(job.id);
        break;
      }
    }
  }
  ForgetSecureRounds(running);
}

void RoundDriver::ForgetSecureRounds(const std::set<JobId>& running) {
  std::vector<SecAggSend> sends;
  {
    MutexLock lock(secure_mu_);
    for (auto it = secure_.begin(); it != secure_.end();) {
      if (running.count(it->second.training)) {
        ++it;
        continue;
      }
      log_->info("training job={} ended during round {}'s secure aggregation: its devices are told",
                 it->second.training, it->first);
      it->second.round.Cancel("the training ended");
      for (SecAggSend& s : it->second.round.TakeSends()) sends.push_back(std::move(s));
      it = secure_.erase(it);
    }
  }
  host_->SendSecAgg(std::move(sends));
}

std::optional<RoundDriver::Progress> RoundDriver::ProgressOf(const JobId& job) const {
  MutexLock lock(mu_);
  auto it = progress_.find(job);
  if (it == progress_.end()) return std::nullopt;
  return it->second;
}

std::optional<JobId> RoundDriver::CurrentRound(const JobId& job) const {
  MutexLock lock(mu_);
  auto it = current_.find(job);
  if (it == current_.end()) return std::nullopt;
  return it->second;
}

void RoundDriver::SetProgress(const JobId& job, Progress progress, std::optional<JobId> current) {
  MutexLock lock(mu_);
  progress_[job] = std::move(progress);
  if (current) {
    current_[job] = *current;
  } else {
    current_.erase(job);
  }
}

void RoundDriver::End(const JobId& job, JobState state, std::string result, std::string error) {
  Status st = host_->EndTraining(job, state, std::move(result), std::move(error));
  if (!st.ok()) log_->warn("training job={} could not be ended: {}", job, st.message());
}

Result<std::string> RoundDriver::PutBlob(const std::string& bytes, const std::string& owner) {
  auto hash = blobs_->Put(bytes);
  if (!hash.ok()) return hash.status();
  CLAW_RETURN_IF_ERROR(host_->GrantBlob(*hash, owner));
  return hash;
}

bool RoundDriver::StepOne(const JobRecord& job) {
  json spec = json::parse(job.spec_json, nullptr, false);
  const json params = spec.is_object() ? spec.value("params", json::object()) : json::object();
  auto t = ParseTrainingSpec(params);
  if (!t.ok()) {
    End(job.id, JobState::kFailed, "", "spec: " + t.status().message());
    return false;
  }
  auto rounds = host_->Rounds(job.id);
  if (!rounds.ok()) {
    log_->error("training job={} cannot read its rounds: {}", job.id, rounds.status().message());
    return false;
  }
  const uint64_t seed = spec.value("seed", uint64_t{1});
  json round_spec = {{"app", "fedround"},
                     {"seed", seed},
                     {"priority", spec.value("priority", 0)},
                     {"max_attempts", 3},
                     {"task_timeout_s", spec.value("task_timeout_s", 3600)},
                     {"replication", 1},
                     {"adaptive", false}};
  if (t->spot_check > 0) {
    // Two agents agree on each checked task; a third breaks a tie.
    round_spec["replication"] = 2;
    round_spec["quorum"] = 2;
    round_spec["max_replicas"] = 3;
    round_spec["adaptive"] = true;
    round_spec["spot_check"] = std::max(t->spot_check, 0.001);
  }
  json round_params = {{"training", t->ToJson()}, {"seed", seed}};
  // Round names stay within a job name's limit (128).
  const std::string name = spec.value("name", job.id).substr(0, 96);

  // The initial model.
  if (rounds->empty()) {
    RoundRecord r0{job.id, 0};
    if (!t->init.empty()) {
      r0.model = t->init;
    } else {
      JobId child = job.id + ".init";
      auto v = host_->Job(child);
      if (!v) {
        round_params["kind"] = "init";
        round_spec["params"] = round_params;
        round_spec["name"] = name + " init";
        Status st = host_->SubmitRound(child, job.owner, round_spec.dump());
        if (!st.ok()) {
          End(job.id, JobState::kFailed, "", "the initial model: " + st.message());
          return false;
        }
        SetProgress(job.id, {"making the initial model", 0, t->rounds}, child);
        return true;
      }
      if (v->record.state == JobState::kRunning) {
        if (!CurrentRound(job.id)) SetProgress(job.id, {"making the initial model", 0, t->rounds}, child);
        return false;
      }
      if (v->record.state != JobState::kDone) {
        End(job.id, JobState::kFailed, "", "the initial model: " + v->record.error);
        return false;
      }
      json res = json::parse(v->record.result_json, nullptr, false);
      r0.model = res.is_object() ? res.value("model", "") : "";
      r0.finished = v->record.finished;
    }
    if (t->secagg.on) {
      // Refused before any round trains, when its masked vectors could not
      // travel.
      auto model = LoadWeights(*blobs_, r0.model);
      Status fits = model.ok() ? SecureVectorFits(ParameterCount(*model), t->TasksPerRound()) : Status::Ok();
      if (!fits.ok()) {
        End(job.id, JobState::kFailed, "", fits.message());
        return false;
      }
    }
    auto size = blobs_->Size(r0.model);
    r0.info_json = json{{"round", 0}, {"model_bytes", size.ok() ? *size : 0}}.dump();
    Status st = host_->SaveRound(r0);
    if (!st.ok()) log_->error("training job={} cannot store round 0: {}", job.id, st.message());
    return st.ok();
  }

  const RoundRecord& last = rounds->back();
  bool final = last.round >= t->rounds;
  if (!final && t->privacy.on && t->privacy.budget > 0 &&
      ProjectedEpsilon(*t, *rounds) > t->privacy.budget) {
    final = true;  // the next round could pass the budget: training stops here
  }
  const uint32_t n = last.round + 1;
  JobId child = final ? job.id + ".eval" : job.id + ".r" + std::to_string(n);
  auto v = host_->Job(child);
  if (!v) {
    round_params["kind"] = final ? "eval" : "train";
    round_params["round"] = n;
    round_params["model"] = last.model;
    round_params["eval"] = final || last.round % t->eval_every == 0;
    if (rounds->size() >= 2 && !last.update.empty()) {
      round_params["base"] = (*rounds)[rounds->size() - 2].model;
      round_params["update"] = last.update;
    }
    round_spec["params"] = round_params;
    round_spec["name"] = name + (final ? " eval" : " round " + std::to_string(n));
    if (!final) {
      round_spec["close_done"] = t->QuorumTasks();
      round_spec["close_after_s"] = t->deadline_s;
      round_spec["close_min"] = t->min_workers;
    }
    Status st = host_->SubmitRound(child, job.owner, round_spec.dump());
    if (!st.ok()) {
      End(job.id, JobState::kFailed, "",
                         (final ? "the evaluation: " : "round " + std::to_string(n) + ": ") +
                             st.message());
      return false;
    }
    std::string line = final ? "evaluating the model of round " + std::to_string(last.round)
                             : "round " + std::to_string(n) + "/" + std::to_string(t->rounds);
    json info = json::parse(last.info_json, nullptr, false);
    if (info.is_object() && info.contains("eval") && info["eval"].is_object()) {
      line += " · accuracy " + Percent(info["eval"].value("accuracy", 0.0)) + " (round " +
              std::to_string(info["eval"].value("of_round", 0)) + "'s model), loss " +
              std::to_string(info["eval"].value("loss", 0.0)).substr(0, 6);
    }
    if (info.is_object() && info.contains("privacy") && info["privacy"].is_object()) {
      char eps[64];
      std::snprintf(eps, sizeof eps, " · ε %.3g spent", info["privacy"].value("epsilon", 0.0));
      line += eps;
    }
    SetProgress(job.id, {line, last.round, t->rounds}, child);
    return true;
  }
  if (v->record.state == JobState::kRunning) {
    // After a restart the driver learns the round it waits on here.
    if (!CurrentRound(job.id)) {
      SetProgress(job.id,
                  {final ? "evaluating the model of round " + std::to_string(last.round)
                         : "round " + std::to_string(n) + "/" + std::to_string(t->rounds),
                   last.round, t->rounds},
                  child);
    }
    return false;
  }
  // A failed evaluation leaves a trained model: the training is done, and
  // its result says the evaluation failed.
  if (v->record.state != JobState::kDone && !final) {
    End(job.id, JobState::kFailed, "", "round " + std::to_string(n) + ": " + v->record.error);
    return false;
  }
  if (final) {
    json result = FinalResult(*t, *rounds, *v);
    if (v->record.state != JobState::kDone) {
      result["evaluation_error"] = v->record.error.empty() ? "cancelled" : v->record.error;
    }
    std::string line = "trained " + std::to_string(last.round) + " rounds";
    if (json e = EvalOf(json::parse(v->record.result_json, nullptr, false)); !e.is_null()) {
      line += " · accuracy " + Percent(e["accuracy"]) + ", loss " +
              std::to_string(e["loss"].get<double>()).substr(0, 6);
    }
    SetProgress(job.id, {line, last.round, t->rounds}, std::nullopt);
    End(job.id, JobState::kDone, result.dump(), "");
    return false;
  }
  std::vector<AgentId> liars;
  Result<RoundRecord> record = Internal("no record");
  if (t->secagg.on) {
    auto secure = SecureAggregate(job, *t, *rounds, *v);
    if (!secure) return false;  // the protocol goes on
    record = std::move(*secure);
  } else {
    record = Aggregate(job, params, *rounds, *v, &liars);
  }
  if (!record.ok()) {
    for (const AgentId& agent : liars) host_->WrongAnswer(agent);
    End(job.id, JobState::kFailed, "",
                       "round " + std::to_string(n) + ": " + record.status().message());
    return false;
  }
  Status st = host_->SaveRound(*record);
  if (!st.ok()) {
    log_->error("training job={} cannot store round {}: {}", job.id, n, st.message());
    return false;
  }
  for (const AgentId& agent : liars) host_->WrongAnswer(agent);
  log_->info("training job={} round={} done", job.id, n);
  return true;
}

Result<RoundRecord> RoundDriver::Aggregate(const JobRecord& job, const json& params,
                                           const std::vector<RoundRecord>& rounds,
                                           const JobView& round_job,
                                           std::vector<AgentId>* liars) {
  auto t = ParseTrainingSpec(params);
  if (!t.ok()) return t.status();
  const RoundRecord& last = rounds.back();
  const uint32_t n = last.round + 1;
  json res = json::parse(round_job.record.result_json, nullptr, false);
  if (!res.is_object() || !res.contains("reports")) return Internal("the round's result is unreadable");
  auto model = LoadWeights(*blobs_, last.model);
  if (!model.ok()) return Status(model.status().code(), "model: " + model.status().message());
  std::vector<Delta> deltas;
  std::vector<json> reporters;  // of deltas[i]
  json rejected = json::array();
  uint64_t bytes_up = 0;
  for (const json& r : res["reports"]) {
    json who = {{"task", r.value("task", 0)}, {"agent", r.value("agent", "")}};
    std::string hash = r.value("delta", "");
    auto bytes = blobs_->Load(hash, kMaxModelBytes);
    Result<Weights> w = bytes.ok() ? ReadWeights(*bytes) : Result<Weights>(bytes.status());
    if (!w.ok()) {
      // Checked when it came (App::CheckOutput): only a lost file gets here.
      rejected.push_back({{"task", who["task"]}, {"agent", who["agent"]},
                          {"why", w.status().message()}});
      continue;
    }
    bytes_up += bytes->size();
    deltas.push_back(Delta{std::move(w).value(), r.value("samples", 1.0), who["agent"]});
    who["samples"] = r.value("samples", 0.0);
    who["train_loss"] = r.value("train_loss", 0.0);
    who["seconds"] = r.value("seconds", 0.0);
    who["task_seconds"] = r.value("task_seconds", 0.0);
    reporters.push_back(std::move(who));
  }
  if (deltas.empty()) return FailedPrecondition("no delta to aggregate");
  Verdicts verdicts = CheckDeltas(*model, deltas, t->check);
  for (const auto& [i, why] : verdicts.rejected) {
    liars->push_back(reporters[i]["agent"].get<std::string>());
    rejected.push_back({{"task", reporters[i]["task"]}, {"agent", reporters[i]["agent"]}, {"why", why}});
  }
  if (verdicts.accepted.empty()) {
    return FailedPrecondition("every delta was refused (first: " +
                              verdicts.rejected.front().second + ")");
  }
  Weights combined;
  json privacy = nullptr;
  if (t->privacy.on) {
    // DP-FedAvg: one unit per device (local data) or per shard.
    std::vector<Delta> units;
    std::vector<std::string> devices;
    if (t->PerDevicePrivacy()) {
      units = MergeByDevice(deltas, verdicts.accepted);
      for (const Delta& u : units) devices.push_back(u.device);
    } else {
      for (size_t i : verdicts.accepted) units.push_back(std::move(deltas[i]));
    }
    PrivateMean dp = PrivateAverage(t->privacy, std::move(units));
    combined = std::move(dp.mean);
    privacy = RoundPrivacy(*t, rounds, dp.units, std::move(devices), false);
    privacy["clipped"] = dp.clipped;
  } else {
    combined = Combine(deltas, verdicts.accepted, t->rule, t->trim);
  }
  double loss = 0, samples = 0;
  json used = json::array();
  for (size_t i : verdicts.accepted) {
    loss += reporters[i]["train_loss"].get<double>() * deltas[i].samples;
    samples += deltas[i].samples;
    used.push_back(reporters[i]);
  }
  json info = {{"round", n},
               {"tasks", round_job.record.n_tasks},
               {"reporters", used},
               {"rejected", rejected},
               {"train_loss", samples > 0 ? loss / samples : 0.0},
               {"bytes_up", bytes_up}};
  if (!privacy.is_null()) {
    // No device's training loss or sample count is published: they are
    // outside the noise (a membership signal).
    info.erase("train_loss");
    for (json& r : info["reporters"]) {
      r.erase("train_loss");
      r.erase("samples");
    }
    info["privacy"] = std::move(privacy);
  }
  return Publish(job, *t, last, round_job, *model, combined, std::move(info));
}

Result<RoundRecord> RoundDriver::Publish(const JobRecord& job, const TrainingSpec& t,
                                         const RoundRecord& last, const JobView& round_job,
                                         const Weights& model, const Weights& combined, json info) {
  auto state = LoadWeights(*blobs_, last.state);
  auto residual = LoadWeights(*blobs_, last.residual);
  if (!state.ok() || !residual.ok()) return Internal("the outer optimizer's state is unreadable");
  // The outer step gives the model it wants; what is published is the
  // previous model plus that change compressed, which every agent rebuilds
  // bit for bit from the update (what compression lost is kept for the
  // next round's update: error feedback).
  Weights wanted = model;
  Weights opt_state = std::move(state).value();
  OuterStep(t.outer, combined, &wanted, &opt_state);
  AddScaled(&wanted, model, -1.0f);
  Weights feedback = std::move(residual).value();
  std::string update_bytes = tensors::WriteSafetensors(Encode(wanted, t.codec, &feedback));
  auto update = ReadWeights(update_bytes);
  if (!update.ok()) return Internal("the update does not decode: " + update.status().message());
  Weights next = Rebuild(model, *update);
  std::string model_bytes = ModelBytes(next);

  RoundRecord rec{job.id, last.round + 1};
  auto put = [&](const std::string& bytes, std::string* hash) {
    auto h = PutBlob(bytes, job.owner);
    if (!h.ok()) return h.status();
    *hash = *h;
    return Status::Ok();
  };
  CLAW_RETURN_IF_ERROR(put(model_bytes, &rec.model));
  CLAW_RETURN_IF_ERROR(put(ModelBytes(opt_state), &rec.state));
  CLAW_RETURN_IF_ERROR(put(ModelBytes(feedback), &rec.residual));
  CLAW_RETURN_IF_ERROR(put(update_bytes, &rec.update));
  info["update_bytes"] = update_bytes.size();
  info["model_bytes"] = model_bytes.size();
  info["seconds"] = static_cast<double>(round_job.record.finished.us - round_job.record.created.us) / 1e6;
  json res = json::parse(round_job.record.result_json, nullptr, false);
  if (json e = EvalOf(res.is_object() ? res : json::object()); !e.is_null()) {
    e["of_round"] = last.round;
    info["eval"] = e;
  }
  rec.info_json = info.dump();
  rec.finished = round_job.record.finished;
  return rec;
}

Status RoundDriver::OnSecAgg(const AgentId& agent, const SecAggReply& reply) {
  Status st = NotFound("secure aggregation: no round in progress has this device");
  {
    MutexLock lock(secure_mu_);
    for (auto& [round, pending] : secure_) {
      st = pending.round.OnReply(agent, reply);
      if (st.code() != StatusCode::kNotFound) break;
    }
  }
  return st;
}

std::optional<Result<RoundRecord>> RoundDriver::SecureAggregate(
    const JobRecord& job, const TrainingSpec& t, const std::vector<RoundRecord>& rounds,
    const JobView& round_job) {
  const RoundRecord& last = rounds.back();
  const uint32_t n = last.round + 1;
  // While the protocol goes on, each Step only moves it: the model and the
  // round's reports are read when it starts and when it ends.
  std::vector<SecAggSend> sends;
  std::optional<SecureRound> ended;
  bool started = false;
  {
    MutexLock lock(secure_mu_);
    auto it = secure_.find(round_job.record.id);
    if (it != secure_.end()) {
      started = true;
      SecureRound& r = it->second.round;
      r.Advance(host_->Now());
      sends = r.TakeSends();
      if (r.closed() || !r.abandoned().empty()) {
        ended.emplace(std::move(r));
        secure_.erase(it);
      }
    }
  }
  if (ended) {
    ended->Finish(host_->Now());  // unmasking, without holding up the devices' replies
    for (SecAggSend& s : ended->TakeSends()) sends.push_back(std::move(s));
  }
  host_->SendSecAgg(std::move(sends));
  if (started && !ended) return std::nullopt;

  auto model = LoadWeights(*blobs_, last.model);
  if (!model.ok()) return Result<RoundRecord>(Status(model.status().code(), "model: " + model.status().message()));
  json res = json::parse(round_job.record.result_json, nullptr, false);
  if (!res.is_object() || !res.contains("reports")) return Result<RoundRecord>(Internal("the round's result is unreadable"));
  std::map<uint32_t, json> reports;  // by task
  for (const json& r : res["reports"]) reports[r.value("task", 0u)] = r;

  std::string why;
  if (!started) {
    std::vector<SecureRound::Device> devices;
    // Every device that announced keys: those the round leaves out (or a
    // round that cannot start) are told to forget them.
    std::vector<std::pair<AgentId, std::string>> announced;  // (agent, handle)
    auto tell_left_out = [&](const std::string& reason, const SecureRound* round) {
      std::vector<SecAggSend> out;
      for (const auto& [agent, handle] : announced) {
        if (!round || !round->Has(handle)) out.push_back(ForgetRound(agent, handle, reason));
      }
      host_->SendSecAgg(std::move(out));
    };
    for (const auto& [task, r] : reports) {
      const json keys = r.value("secagg", json());
      if (!keys.is_object()) continue;
      auto handle = FromHex(keys.value("handle", "")), c = FromHex(keys.value("c_pk", "")),
           s = FromHex(keys.value("s_pk", "")), commit = FromHex(keys.value("commit", ""));
      if (!handle.ok() || !c.ok() || !s.ok() || !commit.ok()) continue;  // checked when it came
      const std::string agent = r.value("agent", "");
      announced.emplace_back(agent, *handle);
      // With each device a privacy unit, one vector per device: a second
      // task of the same agent would double its reach.
      if (t.PerDevicePrivacy() &&
          std::any_of(devices.begin(), devices.end(),
                      [&](const SecureRound::Device& d) { return d.agent == agent; })) {
        continue;
      }
      devices.push_back({task, agent, *handle, {task, *c, *s, *commit}});
    }
    const uint64_t length = ParameterCount(*model);
    if (Status fits = SecureVectorFits(length, static_cast<uint32_t>(devices.size())); !fits.ok()) {
      tell_left_out(fits.message(), nullptr);
      return Result<RoundRecord>(fits);
    }
    secagg::Params params = secagg::DefaultParams(static_cast<uint32_t>(devices.size()), length,
                                                  secagg::kLevels, t.min_workers);
    auto round = SecureRound::Start(params, std::move(devices), std::chrono::seconds(t.secagg.step_s),
                                    host_->Now());
    if (!round.ok()) {
      why = round.status().message();
      tell_left_out(why, nullptr);
    } else {
      tell_left_out("left out of the round (another device announced the same handle or keys, or "
                    "this device had a vector in it already)",
                    &*round);
      {
        // Registered before its first messages go, so that no reply finds
        // no round.
        MutexLock lock(secure_mu_);
        auto it = secure_.emplace(round_job.record.id, SecurePending{job.id, std::move(round).value()}).first;
        sends = it->second.round.TakeSends();
      }
      host_->SendSecAgg(std::move(sends));
      return std::nullopt;
    }
  }

  json info = {{"round", n}, {"tasks", round_job.record.n_tasks}, {"rejected", json::array()}};
  json reporters = json::array();
  double loss = 0;
  if (ended) {
    info["secure_aggregation"] = ended->Info();
    info["bytes_up"] = info["secure_aggregation"]["bytes_up"];
    if (ended->done()) {
      for (secagg::DeviceId id : ended->server().masked()) {
        const json& r = reports[id];
        reporters.push_back({{"task", id}, {"agent", r.value("agent", "")},
                             {"samples", r.value("samples", 0.0)},
                             {"train_loss", r.value("train_loss", 0.0)},
                             {"seconds", r.value("seconds", 0.0)},
                             {"task_seconds", r.value("task_seconds", 0.0)}});
        loss += r.value("train_loss", 0.0);
      }
    } else {
      why = ended->abandoned();
    }
  }
  info["reporters"] = reporters;
  if (!why.empty()) {
    // Abandoned: the model stays; nothing of any device was released, so
    // nothing is spent.
    log_->warn("training job={} round={} abandoned: {}", job.id, n, why);
    info["abandoned"] = why;
    info["train_loss"] = 0.0;
    RoundRecord rec{job.id, n};
    rec.model = last.model;
    rec.state = last.state;
    rec.residual = last.residual;
    rec.info_json = info.dump();
    rec.finished = round_job.record.finished;
    return Result<RoundRecord>(std::move(rec));
  }
  // The mean of the vectors that were summed, equal weights; with
  // differential privacy, noise on the sum (the devices clipped).
  const int bits = ended->server().roster().params.bits;
  const std::vector<uint32_t>& sum = ended->sum();
  Weights combined = ZerosLike(*model);
  const uint64_t length = ParameterCount(*model);
  const double range = SecureRange(t.secagg.range, t.privacy.on ? t.privacy.clip : 0, length);
  const double step = range / secagg::kLevels;
  size_t at = 0;
  for (Named& tensor : combined) {
    for (float& x : tensor.values) x = static_cast<float>(secagg::Signed(sum[at++], bits) * step);
  }
  const double m = static_cast<double>(reporters.size());
  // With privacy, no device's training loss or sample count is published:
  // they are outside the noise (a membership signal).
  if (t.privacy.on) {
    for (json& r : reporters) {
      r.erase("train_loss");
      r.erase("samples");
    }
    info["reporters"] = reporters;
  } else {
    info["train_loss"] = loss / m;
  }
  if (t.privacy.on) {
    // Calibrated to what one device can add after rounding, not to C.
    const double sensitivity = SecureSensitivity(t.privacy.clip, range, length);
    AddGaussianNoise(&combined, t.privacy.noise * sensitivity);
    std::vector<std::string> devices;
    for (const json& r : reporters) devices.push_back(r["agent"].get<std::string>());
    json privacy = RoundPrivacy(t, rounds, reporters.size(), std::move(devices), true);
    privacy["sensitivity"] = sensitivity;
    privacy["range"] = range;
    info["privacy"] = std::move(privacy);
  }
  for (Named& tensor : combined) {
    for (float& x : tensor.values) x = static_cast<float>(x / m);
  }
  return Publish(job, t, last, round_job, *model, combined, std::move(info));
}

json RoundDriver::FinalResult(const TrainingSpec& t, const std::vector<RoundRecord>& rounds,
                              const JobView& eval) {
  json curve = json::array(), per_round = json::array();
  uint64_t up = 0, updates = 0, model_bytes = 0;
  for (const RoundRecord& r : rounds) {
    json info = json::parse(r.info_json, nullptr, false);
    if (!info.is_object()) continue;
    model_bytes = info.value("model_bytes", model_bytes);
    if (r.round == 0) continue;
    if (info.contains("eval")) {
      json point = info["eval"];
      point["round"] = point.value("of_round", 0);
      point.erase("of_round");
      curve.push_back(point);
    }
    json agents = json::array();
    for (const auto& who : info.value("reporters", json::array())) agents.push_back(who["agent"]);
    up += info.value("bytes_up", uint64_t{0});
    updates += info.value("update_bytes", uint64_t{0});
    per_round.push_back({{"round", r.round},
                         {"agents", agents},
                         {"rejected", info.value("rejected", json::array())},
                         {"bytes_up", info.value("bytes_up", 0)},
                         {"update_bytes", info.value("update_bytes", 0)},
                         {"seconds", info.value("seconds", 0.0)}});
    for (const char* k : {"train_loss", "privacy", "secure_aggregation", "abandoned"}) {
      if (info.contains(k)) per_round.back()[k] = info[k];
    }
  }
  json res = json::parse(eval.record.result_json, nullptr, false);
  const RoundRecord& last = rounds.back();
  json final_eval = EvalOf(res.is_object() ? res : json::object());
  json files = json::array();
  if (res.is_object() && res.contains("checkpoint")) files.push_back(res["checkpoint"]);
  auto size = blobs_->Size(last.model);
  files.push_back({{"path", "model.safetensors"}, {"sha256", last.model},
                   {"size", size.ok() ? *size : 0}});
  json trial = {{"files", files}, {"rounds", last.round}};
  // A user's module: the model is its trainable parameters, which the
  // module file completes (infer --model-of takes both).
  json eval_spec = json::parse(eval.record.spec_json, nullptr, false);
  if (eval_spec.is_object() && eval_spec.contains("params") && eval_spec["params"].is_object()) {
    const json& training = eval_spec["params"].value("training", json::object());
    if (training.is_object() && training.contains("script")) trial["params"] = {{"script", training["script"]}};
  }
  if (!final_eval.is_null()) {
    final_eval["round"] = last.round;
    curve.push_back(final_eval);
    trial["final"] = {{"test_accuracy", final_eval["accuracy"]}, {"test_loss", final_eval["loss"]}};
  }
  json out = {{"metric", "test_accuracy"},
              {"mode", "max"},
              {"trials", json::array({trial})},
              {"curve", curve},
              {"rounds", per_round},
              {"bytes", {{"up", up}, {"updates", updates}, {"model", model_bytes}}}};
  if (!final_eval.is_null()) out["best"] = {{"trial", 0}, {"metric", final_eval["accuracy"]}};
  if (t.privacy.on) {
    const std::vector<RoundSpend> spends = Spends(rounds);
    json p = PrivacyToJson(t.privacy);
    p["epsilon_spent"] = EpsilonSpent(spends, t.privacy.delta, t.PerDevicePrivacy());
    p["unit"] = t.PerDevicePrivacy() ? "device" : "shard";
    p["secure_aggregation"] = t.secagg.on;
    p["rounds_private"] = spends.size();
    if (last.round < t.rounds) {
      p["stopped"] = "after round " + std::to_string(last.round) + " of " +
                     std::to_string(t.rounds) + ": another round could pass the budget of ε = " +
                     std::to_string(t.privacy.budget).substr(0, 6);
    }
    out["privacy"] = std::move(p);
  }
  return out;
}

}  // namespace claw::rounds

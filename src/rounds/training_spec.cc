#include "rounds/training_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "common/blobs.h"
#include "core/json_fields.h"
#include "core/model_data.h"

namespace claw::rounds {
namespace {

using nlohmann::json;

const char* const kDatasetFiles[] = {"train_images", "train_labels", "test_images", "test_labels"};

// Collects the first error of a run of field reads.
class Reads {
 public:
  template <typename T>
  T operator()(Result<T> r, T fallback = T()) {
    if (!r.ok()) {
      if (bad_.ok()) bad_ = r.status();
      return fallback;
    }
    return *std::move(r);
  }
  const Status& status() const { return bad_; }

 private:
  Status bad_ = Status::Ok();
};

Status ParseInner(const json& j, InnerSpec* out) {
  if (!j.is_object()) return InvalidArgument("params.inner: must be an object");
  FieldReader f(j, "params.inner");
  CLAW_RETURN_IF_ERROR(
      f.NoUnknownFields({"optimizer", "lr", "batch", "steps", "weight_decay", "momentum"}));
  Reads r;
  out->optimizer = r(f.OneOf("optimizer", {"adamw", "sgd"}, "adamw"));
  out->lr = r(f.Number("lr", 1e-8, 10, 1e-3));
  out->batch = static_cast<int>(r(f.Integer("batch", 1, 4096, 64)));
  out->steps = static_cast<int>(
      r(f.Integer("steps", 1, 1'000'000, std::nullopt)));  // H = 0 would train nothing
  out->weight_decay = r(f.Number("weight_decay", 0, 1, 0));
  out->momentum = r(f.Number("momentum", 0, 0.999, 0.9));
  return r.status();
}

Status ParseOuterSpec(const json& j, OuterSpec* out) {
  if (!j.is_object()) return InvalidArgument("params.outer: must be an object");
  FieldReader f(j, "params.outer");
  CLAW_RETURN_IF_ERROR(f.NoUnknownFields({"optimizer", "lr", "momentum", "beta1", "beta2", "epsilon"}));
  Reads r;
  std::string kind = r(f.OneOf("optimizer", {"fedavg", "nesterov", "adam"}, "nesterov"));
  CLAW_RETURN_IF_ERROR(r.status());
  ParseOuter(kind, &out->kind);
  double default_lr = out->kind == Outer::kNesterov ? 0.7 : out->kind == Outer::kAdam ? 0.01 : 1.0;
  out->lr = r(f.Number("lr", 1e-6, 10, default_lr));
  out->momentum = r(f.Number("momentum", 0, 0.999, 0.9));
  out->beta1 = r(f.Number("beta1", 0, 0.9999, 0.9));
  out->beta2 = r(f.Number("beta2", 0, 0.99999, 0.99));
  out->epsilon = r(f.Number("epsilon", 1e-12, 1, 1e-3));
  return r.status();
}

Status ParseAggregation(const json& j, TrainingSpec* out) {
  if (!j.is_object()) return InvalidArgument("params.aggregation: must be an object");
  FieldReader f(j, "params.aggregation");
  CLAW_RETURN_IF_ERROR(f.NoUnknownFields({"rule", "trim", "max_norm", "norm_factor"}));
  Reads r;
  std::string rule = r(f.OneOf("rule", {"mean", "median", "trimmed_mean"}, "mean"));
  out->trim = r(f.Number("trim", 0, 0.49, 0.1));
  out->check.max_norm = r(f.Number("max_norm", 0, 1e12, 0));
  out->check.norm_factor = r(f.Number("norm_factor", 0, 1e6, 0));
  CLAW_RETURN_IF_ERROR(r.status());
  if (out->check.norm_factor > 0 && out->check.norm_factor < 1) {
    return InvalidArgument("params.aggregation.norm_factor: below 1 would refuse the median "
                           "delta itself (0: no bound)");
  }
  ParseRule(rule, &out->rule);
  return Status::Ok();
}

// What differential privacy asks of the rest of the spec.
Status CheckPrivacy(const TrainingSpec& s) {
  if (s.rule != Rule::kMean) {
    return InvalidArgument("params.aggregation.rule: differential privacy needs \"mean\" (its "
                           "noise is calibrated to one device's share of a sum)");
  }
  if (s.check.max_norm > 0 || s.check.norm_factor > 0) {
    return InvalidArgument("params.aggregation: with differential privacy, clip_norm bounds every "
                           "delta; max_norm and norm_factor would refuse devices by their data");
  }
  if (s.spot_check > 0) {
    return InvalidArgument("params.spot_check: not with differential privacy (a second agent "
                           "would train on the same device's data)");
  }
  if (!s.PerDevicePrivacy() && s.shards < s.TasksPerRound()) {
    return InvalidArgument("params.shards: with differential privacy each of a round's " +
                           std::to_string(s.TasksPerRound()) + " tasks trains on a shard of its "
                           "own (a simulated device): at least that many shards");
  }
  PrivacyPlan plan = PlanPrivacy(s.privacy, s.SampleRate(), s.rounds);
  if (s.privacy.budget > 0 && plan.rounds_in_budget == 0) {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "params.privacy.epsilon: one round already spends ε = %.3g at δ = %g (noise "
                  "multiplier %g, each %s taking part with probability %.3g), more than the "
                  "budget of %g: raise noise_multiplier or the budget%s",
                  plan.first_round_epsilon, s.privacy.delta, s.privacy.noise,
                  s.PerDevicePrivacy() ? "device" : "shard", s.SampleRate(), s.privacy.budget,
                  s.PerDevicePrivacy() ? "" : ", or split the data into more shards");
    return InvalidArgument(buf);
  }
  return Status::Ok();
}

Status ParseSecureAgg(const json& j, bool min_workers_given, TrainingSpec* s) {
  if (j.is_boolean()) {
    s->secagg.on = j.get<bool>();
  } else if (j.is_object()) {
    FieldReader f(j, "params.secure_aggregation");
    CLAW_RETURN_IF_ERROR(f.NoUnknownFields({"range", "step_s"}));
    Reads r;
    s->secagg.range = r(f.Number("range", 0, 1e9, 0.0), 0.0);  // 0: the default
    s->secagg.step_s = static_cast<uint32_t>(r(f.Integer("step_s", 1, 3600, 60)));
    CLAW_RETURN_IF_ERROR(r.status());
    s->secagg.on = true;
  } else {
    return InvalidArgument("params.secure_aggregation: true, or {\"range\", \"step_s\"}");
  }
  if (!s->secagg.on) return Status::Ok();
  // With privacy and no range, 0: it depends on the model's size
  // (rounds/secure_round.h, SecureRange).
  if (s->secagg.range <= 0 && !s->privacy.on) s->secagg.range = s->inner.lr * s->inner.steps;
  if (s->rule != Rule::kMean || s->check.max_norm > 0 || s->check.norm_factor > 0) {
    return InvalidArgument("params.aggregation: with secure aggregation the coordinator sees only "
                           "the sum: rule \"mean\", no max_norm or norm_factor");
  }
  if (s->spot_check > 0) {
    return InvalidArgument("params.spot_check: not with secure aggregation (masked deltas cannot "
                           "be compared)");
  }
  if (!min_workers_given) s->min_workers = std::max<uint32_t>(s->min_workers, 2);
  if (s->QuorumTasks() < 2 || s->min_workers < 2) {
    return InvalidArgument("params.min_workers: secure aggregation needs at least 2 devices in a "
                           "sum (the sum of one is its delta)");
  }
  return Status::Ok();
}

}  // namespace

bool IsDatasetName(std::string_view name) {
  if (name.empty() || name.size() > 48 || name[0] == '.') return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

uint32_t TrainingSpec::TasksPerRound() const {
  return static_cast<uint32_t>(std::ceil(workers * overprovision - 1e-9));
}

uint32_t TrainingSpec::QuorumTasks() const {
  auto q = static_cast<uint32_t>(std::ceil(quorum * workers - 1e-9));
  return std::clamp<uint32_t>(q, 1, TasksPerRound());
}

Result<TrainingSpec> ParseTrainingSpec(const json& p) {
  if (!p.is_object()) return InvalidArgument("params: must be an object");
  FieldReader f(p, "params");
  CLAW_RETURN_IF_ERROR(f.NoUnknownFields(
      {"model", "width", "layers", "dropout", "init", "dataset", "local_dataset", "split", "shards",
       "train_limit", "test_limit", "rounds", "workers", "overprovision", "quorum", "deadline_s",
       "min_workers", "inner", "outer", "compression", "aggregation", "eval_every", "threads",
       "spot_check", "script", "data", "memory_mb", "block", "privacy", "secure_aggregation"}));
  TrainingSpec s;
  Reads r;
  const bool script = p.contains("script");
  if (script) {  // a user's TorchScript module (docs/models.md)
    for (const char* builtin : {"model", "width", "layers", "dropout", "dataset"}) {
      if (p.contains(builtin)) {
        return InvalidArgument(std::string("params.") + builtin + ": not for a script model (params.script "
                               "names the model" + (std::string(builtin) == "dataset" ? "; its arrays are params.data)" : ")"));
      }
    }
    if (!p["script"].is_string() || !IsBlobHash(p["script"].get_ref<const std::string&>())) {
      return InvalidArgument("params.script: must be the TorchScript file's blob SHA-256 (claw submit "
                             "--script FILE uploads it)");
    }
    s.arch = {{"script", p["script"]}, {"memory_mb", r(f.Integer("memory_mb", 256, 1 << 20, 4096))}};
    // Token files: rows of `block` tokens (core/model_data.h).
    if (p.contains("block")) s.arch["block"] = r(f.Integer("block", 1, 65536, std::nullopt));
  } else {
    for (const char* field : {"data", "memory_mb", "block"}) {
      if (p.contains(field)) {
        return InvalidArgument(std::string("params.") + field + ": for a script model (params.script) alone");
      }
    }
    s.arch = {{"model", r(f.OneOf("model", {"cnn", "mlp"}, "cnn"))},
              {"width", r(f.Integer("width", 1, 1024, 32))},
              {"layers", r(f.Integer("layers", 1, 8, 2))},
              {"dropout", r(f.Number("dropout", 0, 0.95, 0.2))}};
  }
  s.split = r(f.OneOf("split", {"iid", "by_label"}, "iid"));
  s.train_limit = static_cast<uint64_t>(r(f.Integer("train_limit", 0, 100'000'000, 0)));
  s.test_limit = static_cast<uint64_t>(r(f.Integer("test_limit", 0, 100'000'000, 0)));
  s.rounds = static_cast<uint32_t>(r(f.Integer("rounds", 1, 100'000, std::nullopt)));
  s.workers = static_cast<uint32_t>(r(f.Integer("workers", 1, 10'000, std::nullopt)));
  s.overprovision = r(f.Number("overprovision", 1, 4, 1.25));
  s.quorum = r(f.Number("quorum", 0.01, 1, 1.0));
  s.deadline_s = static_cast<uint32_t>(r(f.Integer("deadline_s", 1, 7 * 24 * 3600, 3600)));
  s.eval_every = static_cast<uint32_t>(r(f.Integer("eval_every", 1, 100'000, 1)));
  s.threads = static_cast<uint32_t>(r(f.Integer("threads", 1, 256, 1)));
  s.spot_check = r(f.Number("spot_check", 0, 1, 0));
  std::string codec = r(f.OneOf("compression", {"fp32", "fp16", "int8"}, "int8"));
  CLAW_RETURN_IF_ERROR(r.status());
  ParseCodec(codec, &s.codec);
  s.shards = static_cast<uint32_t>(r(f.Integer("shards", 1, 1'000'000, s.workers)));
  s.min_workers = static_cast<uint32_t>(r(f.Integer("min_workers", 1, 10'000, 1)));
  CLAW_RETURN_IF_ERROR(r.status());
  if (s.min_workers > s.QuorumTasks()) {
    return InvalidArgument("params.min_workers: " + std::to_string(s.min_workers) +
                           " is more than the quorum of " + std::to_string(s.QuorumTasks()) +
                           " workers");
  }
  if (s.TasksPerRound() > 100'000) return InvalidArgument("params.workers: too many tasks per round");

  const char* const data_field = script ? "data" : "dataset";
  bool has_blobs = p.contains(data_field), has_local = p.contains("local_dataset");
  if (has_blobs == has_local) {
    return InvalidArgument(std::string("params.") + data_field + ": give either the dataset's four blobs " +
                           (script ? "(claw submit --data DIR uploads them)" : "(claw submit --dataset DIR "
                                                                               "uploads them)") +
                           " or local_dataset, the name of a dataset that agents keep");
  }
  if (has_blobs && script) {
    auto data = CheckModelData(p, "params", true);
    if (!data.ok()) return data.status();
    s.dataset = data->data;
  } else if (has_blobs) {
    const json& d = p[data_field];
    const std::string field = std::string("params.") + data_field;
    if (!d.is_object()) return InvalidArgument(field + ": must be an object");
    const char* const* files = kDatasetFiles;
    for (size_t i = 0; i < 4; ++i) {
      const char* name = files[i];
      if (!d.contains(name) || !d[name].is_string() ||
          !IsBlobHash(d[name].get_ref<const std::string&>())) {
        return InvalidArgument(field + "." + name + ": must be a blob's SHA-256 (training in rounds "
                               "evaluates on the test files too)");
      }
    }
    if (d.size() != 4) {
      return InvalidArgument(field + ": only " + files[0] + ", " + files[1] + ", " + files[2] + ", " +
                             files[3]);
    }
    s.dataset = d;
  } else {
    s.local_dataset = r(f.String("local_dataset", 64, std::nullopt));
    CLAW_RETURN_IF_ERROR(r.status());
    if (!IsDatasetName(s.local_dataset)) {
      return InvalidArgument("params.local_dataset: letters, digits, '-', '_' and '.' only");
    }
  }
  if (s.arch.contains("block") && s.split == "by_label") {
    return InvalidArgument("params.split: by_label needs class labels; token files have none (iid)");
  }
  if (p.contains("init")) {
    if (!p["init"].is_string() || !IsBlobHash(p["init"].get_ref<const std::string&>())) {
      return InvalidArgument(std::string("params.init: must be a model blob's SHA-256 (safetensors") +
                             (script ? ": the module's trainable parameters, as a train job returns them)" : ")"));
    }
    s.init = p["init"];
  }
  if (!p.contains("inner")) {
    return InvalidArgument("params.inner: required (at least {\"steps\": H}, the inner steps per "
                           "round)");
  }
  CLAW_RETURN_IF_ERROR(ParseInner(p["inner"], &s.inner));
  CLAW_RETURN_IF_ERROR(ParseOuterSpec(p.value("outer", json::object()), &s.outer));
  CLAW_RETURN_IF_ERROR(ParseAggregation(p.value("aggregation", json::object()), &s));
  if (s.rule == Rule::kTrimmedMean && std::floor(s.trim * s.QuorumTasks()) < 1) {
    return InvalidArgument("params.aggregation.trim: with a quorum of " +
                           std::to_string(s.QuorumTasks()) + " it trims nothing");
  }
  s.check.max_samples = static_cast<double>(s.inner.steps) * s.inner.batch;
  auto privacy = ParsePrivacy(p);
  if (!privacy.ok()) return privacy.status();
  s.privacy = *privacy;
  if (s.privacy.on) CLAW_RETURN_IF_ERROR(CheckPrivacy(s));
  if (p.contains("secure_aggregation")) CLAW_RETURN_IF_ERROR(ParseSecureAgg(p["secure_aggregation"], p.contains("min_workers"), &s));
  return s;
}

double TrainingSpec::SampleRate() const {
  if (PerDevicePrivacy()) return 1;
  return std::min(1.0, static_cast<double>(TasksPerRound()) / static_cast<double>(shards));
}

json TrainingSpec::ToJson() const {
  json j = arch;
  if (!init.empty()) j["init"] = init;
  if (local_dataset.empty()) {
    j[arch.contains("script") ? "data" : "dataset"] = dataset;
  } else {
    j["local_dataset"] = local_dataset;
  }
  j["split"] = split;
  j["shards"] = shards;
  j["train_limit"] = train_limit;
  j["test_limit"] = test_limit;
  j["rounds"] = rounds;
  j["workers"] = workers;
  j["overprovision"] = overprovision;
  j["quorum"] = quorum;
  j["deadline_s"] = deadline_s;
  j["min_workers"] = min_workers;
  j["inner"] = {{"optimizer", inner.optimizer}, {"lr", inner.lr},
                {"batch", inner.batch},         {"steps", inner.steps},
                {"weight_decay", inner.weight_decay}, {"momentum", inner.momentum}};
  j["outer"] = {{"optimizer", OuterName(outer.kind)}, {"lr", outer.lr},
                {"momentum", outer.momentum},          {"beta1", outer.beta1},
                {"beta2", outer.beta2},                {"epsilon", outer.epsilon}};
  j["compression"] = CodecName(codec);
  j["aggregation"] = {{"rule", RuleName(rule)},
                      {"trim", trim},
                      {"max_norm", check.max_norm},
                      {"norm_factor", check.norm_factor}};
  j["eval_every"] = eval_every;
  j["threads"] = threads;
  j["spot_check"] = spot_check;
  if (privacy.on) j["privacy"] = PrivacyToJson(privacy);
  if (secagg.on) j["secure_aggregation"] = {{"range", secagg.range}, {"step_s", secagg.step_s}};
  return j;
}

}  // namespace claw::rounds

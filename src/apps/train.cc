#include "apps/train.h"

#include <algorithm>
#include <cmath>

#include "apps/blob_fields.h"
#include "apps/script_trial.h"
#include "common/blobs.h"
#include "core/json_fields.h"
#include "ml/api.h"

namespace claw {
namespace {

using nlohmann::json;

const char* const kDatasetFiles[] = {"train_images", "train_labels", "test_images", "test_labels"};

// Non-finite numbers (a diverged run) become null: JSON has no NaN.
json Finite(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json EpochJson(const ml::EpochMetrics& m) {
  return {{"epoch", m.epoch},
          {"loss", Finite(m.loss)},
          {"accuracy", Finite(m.accuracy)},
          {"test_loss", Finite(m.test_loss)},
          {"test_accuracy", Finite(m.test_accuracy)},
          {"seconds", m.seconds}};
}

}  // namespace

Result<json> TrainApp::CheckTrial(const json& params, const std::string& prefix) {
  if (!params.is_object()) return InvalidArgument(prefix + ": must be an object");
  if (IsScriptTrial(params)) return CheckScriptTrial(params, prefix);
  FieldReader f(params, prefix);
  CLAW_RETURN_IF_ERROR(f.NoUnknownFields(
      {"dataset", "model", "width", "layers", "dropout", "lr", "batch", "epochs", "optimizer",
       "momentum", "weight_decay", "seed", "train_limit", "test_limit", "threads", "resume",
       "save_model"}));
  json out = json::object();
  const json* dataset = params.contains("dataset") ? &params["dataset"] : nullptr;
  if (!dataset || !dataset->is_object()) {
    return InvalidArgument(prefix + ".dataset: the dataset's four blobs are required "
                           "(claw submit --dataset DIR uploads them)");
  }
  for (const char* name : kDatasetFiles) {
    if (!dataset->contains(name) || !(*dataset)[name].is_string() ||
        !IsBlobHash((*dataset)[name].get_ref<const std::string&>())) {
      return InvalidArgument(prefix + ".dataset." + name + ": must be a blob's SHA-256");
    }
  }
  out["dataset"] = *dataset;
  // Each field read with its default; the first error is the answer.
  FieldsInto put(out);
  put("model", f.OneOf("model", {"cnn", "mlp"}, "cnn"));
  put("width", f.Integer("width", 1, 1024, 32));
  put("layers", f.Integer("layers", 1, 8, 2));
  put("dropout", f.Number("dropout", 0, 0.95, 0.2));
  put("lr", f.Number("lr", 1e-7, 10, 0.01));
  put("batch", f.Integer("batch", 1, 65536, 64));
  put("epochs", f.Integer("epochs", 1, 1000, 1));
  put("optimizer", f.OneOf("optimizer", {"sgd", "adam"}, "sgd"));
  put("momentum", f.Number("momentum", 0, 0.999, 0.9));
  put("weight_decay", f.Number("weight_decay", 0, 1, 0));
  put("seed", f.Integer("seed", 0, int64_t{1} << 53, 1));
  put("train_limit", f.Integer("train_limit", 0, 60000, 0));
  put("test_limit", f.Integer("test_limit", 0, 10000, 0));
  put("threads", f.Integer("threads", 1, 256, 1));
  CLAW_RETURN_IF_ERROR(put.status());
  if (params.contains("resume")) {
    if (!params["resume"].is_string() || !IsBlobHash(params["resume"].get_ref<const std::string&>())) {
      return InvalidArgument(prefix + ".resume: must be a checkpoint blob's SHA-256");
    }
    out["resume"] = params["resume"];
  }
  if (params.contains("save_model")) {
    if (!params["save_model"].is_boolean()) return InvalidArgument(prefix + ".save_model: true or false");
    out["save_model"] = params["save_model"];
  }
  return out;
}

Result<std::vector<TaskSpec>> TrainApp::Plan(const JobSpec& spec) const {
  auto trial = CheckTrial(spec.params, "params");
  if (!trial.ok()) return trial.status();
  if (spec.tasks > 1) {
    return InvalidArgument("spec.tasks: a train job is one trial; use a sweep for several");
  }
  // Cost, for lease lengths: ~2 GFLOP per image-epoch is generous for the
  // small models here.
  double images = (*trial)["train_limit"].get<int64_t>() > 0 ? (*trial)["train_limit"].get<double>()
                                                               : 60000.0;
  double cost = 2e9 * images * (*trial)["epochs"].get<double>() / 1000.0;
  return std::vector<TaskSpec>{TaskSpec{trial->dump(), cost}};
}

Result<std::string> TrainApp::Run(std::string_view task_params, const RunContext& ctx) const {
  json p = json::parse(task_params, nullptr, false);
  auto trial = CheckTrial(p, "train task");
  if (!trial.ok()) return trial.status();
  if (!ctx.blobs) return FailedPrecondition("train task: this worker has no blob cache");
  if (IsScriptTrial(*trial)) return RunScriptTrial(*trial, ctx);
  const json& t = *trial;
  ml::TrainConfig c;
  c.model = t["model"];
  c.width = t["width"];
  c.layers = t["layers"];
  c.dropout = t["dropout"];
  c.lr = t["lr"];
  c.batch = t["batch"];
  c.epochs = t["epochs"];
  c.optimizer = t["optimizer"];
  c.momentum = t["momentum"];
  c.weight_decay = t["weight_decay"];
  c.seed = t["seed"];
  c.train_limit = t["train_limit"];
  c.test_limit = t["test_limit"];
  c.threads = t["threads"];
  for (const char* name : kDatasetFiles) {
    std::string hash = t["dataset"][name];
    if (!ctx.blobs->Has(hash)) return FailedPrecondition(std::string("dataset.") + name + ": not fetched");
  }
  c.data = {ctx.blobs->PathOf(t["dataset"]["train_images"].get<std::string>()),
            ctx.blobs->PathOf(t["dataset"]["train_labels"].get<std::string>()),
            ctx.blobs->PathOf(t["dataset"]["test_images"].get<std::string>()),
            ctx.blobs->PathOf(t["dataset"]["test_labels"].get<std::string>())};
  if (t.contains("resume")) c.resume_from = ctx.blobs->PathOf(t["resume"].get<std::string>());
  auto lib = ml::LoadMl();
  if (!lib.ok()) return lib.status();
  auto r = (*lib)->train(c);
  if (!r.ok()) return r.status();
  json params = t;
  params.erase("dataset");
  json out = {{"params", params}, {"epochs", json::array()}, {"parameters", r->parameters},
              {"first_epoch", r->first_epoch}};
  for (const auto& m : r->epochs) out["epochs"].push_back(EpochJson(m));
  if (r->diverged) {  // a result, unranked: no metric, no model
    out["diverged"] = true;
    out["final"] = {{"epoch", r->epochs.back().epoch}, {"diverged", true}};
    return out.dump();
  }
  if (!r->epochs.empty()) out["final"] = out["epochs"].back();
  if (t.value("save_model", true)) {
    auto hash = ctx.blobs->Put(r->checkpoint);
    if (!hash.ok()) return hash.status();
    out["files"] = json::array(
        {{{"path", "model.pt"}, {"sha256", *hash}, {"size", r->checkpoint.size()}}});
  }
  return out.dump();
}

Result<json> TrainApp::Merge(const JobSpec&, const std::vector<std::string_view>& outputs) const {
  json trials = json::array();
  int best = -1;
  double best_accuracy = -1;
  for (std::string_view o : outputs) {
    json t = json::parse(o, nullptr, false);
    if (!t.is_object()) return InvalidArgument("a train task's output is not JSON");
    double acc = t.contains("final") ? t["final"].value("test_accuracy", -1.0) : -1.0;
    if (acc > best_accuracy) {
      best_accuracy = acc;
      best = static_cast<int>(trials.size());
    }
    trials.push_back(std::move(t));
  }
  // The shape of a sweep's result: readers need to know one.
  json out = {{"metric", "test_accuracy"}, {"mode", "max"}, {"trials", std::move(trials)}};
  if (best >= 0) out["best"] = {{"trial", best}, {"metric", best_accuracy}};
  return out;
}

bool TrainApp::Equivalent(std::string_view, std::string_view a, std::string_view b) const {
  json x = json::parse(a, nullptr, false), y = json::parse(b, nullptr, false);
  if (!x.is_object() || !y.is_object() || !x.contains("final") || !y.contains("final")) {
    return a == b;
  }
  if (x["epochs"].size() != y["epochs"].size() || x["params"] != y["params"]) return false;
  double ax = x["final"].value("test_accuracy", -1.0), ay = y["final"].value("test_accuracy", -1.0);
  double lx = x["final"].value("test_loss", -1.0), ly = y["final"].value("test_loss", -1.0);
  return std::abs(ax - ay) <= kAccuracyTolerance &&
         std::abs(lx - ly) <= kLossTolerance * std::max(std::abs(lx), std::abs(ly));
}

Status TrainApp::Runnable() const { return ml::FindMl().status(); }

std::vector<std::string> TrainApp::SpecInputBlobs(const JobSpec& spec) const {
  return TrialBlobs(spec.params);
}

std::vector<std::string> TrainApp::TaskInputBlobs(std::string_view task_params) const {
  return TrialBlobs(json::parse(task_params, nullptr, false));
}

std::vector<std::string> TrainApp::TrialBlobs(const json& p) {
  if (!p.is_object()) return {};
  if (IsScriptTrial(p)) return ScriptTrialBlobs(p);
  std::vector<std::string> out = p.contains("dataset") ? BlobHashesIn(p["dataset"]) : std::vector<std::string>{};
  if (p.contains("resume") && p["resume"].is_string() &&
      IsBlobHash(p["resume"].get_ref<const std::string&>())) {
    out.push_back(p["resume"]);
  }
  return out;
}

std::vector<std::string> TrainApp::OutputBlobs(std::string_view task_output) const {
  json o = json::parse(task_output, nullptr, false);
  std::vector<std::string> out = OutputFileBlobs(o);
  // A script trial's "resume" (its optimizer state) travels too: a sweep's
  // next rung goes on from it.
  if (o.is_object() && o.contains("resume")) {
    for (std::string& h : BlobHashesIn(o["resume"])) out.push_back(std::move(h));
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  return out;
}

std::vector<std::string> TrainApp::Needs(const JobSpec& spec) const {
  // A user's module runs only in the sandbox: agents without one get none.
  if (IsScriptTrial(spec.params)) return {"train", "exec"};
  return {"train"};
}

}  // namespace claw

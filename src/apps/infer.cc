#include "apps/infer.h"

#include <algorithm>

#include "apps/blob_fields.h"
#include "apps/script_infer.h"
#include "common/blobs.h"
#include "core/json_fields.h"
#include "ml/api.h"

namespace claw {
namespace {

using nlohmann::json;

// The blobs a task reads: model, images and (optional) labels.
struct Inputs {
  std::string model, images, labels;
};

Result<Inputs> ReadInputs(const json& p, const std::string& prefix) {
  if (!p.is_object()) return InvalidArgument(prefix + ": must be an object");
  auto hash_at = [&](const json& obj, const char* key, const std::string& name) -> Result<std::string> {
    if (!obj.contains(key) || !obj[key].is_string() || !IsBlobHash(obj[key].get_ref<const std::string&>())) {
      return InvalidArgument(name + ": must be a blob's SHA-256");
    }
    return obj[key].get<std::string>();
  };
  Inputs in;
  auto model = hash_at(p, "model", prefix + ".model");
  if (!model.ok()) return model.status();
  in.model = *model;
  if (!p.contains("dataset") || !p["dataset"].is_object()) {
    return InvalidArgument(prefix + ".dataset: the dataset's blobs are required "
                           "(claw submit --dataset DIR uploads them)");
  }
  std::string split = p.value("split", "test");
  if (split != "test" && split != "train") return InvalidArgument(prefix + ".split: test or train");
  std::string images = split + "_images", labels = split + "_labels";
  auto im = hash_at(p["dataset"], images.c_str(), prefix + ".dataset." + images);
  if (!im.ok()) return im.status();
  in.images = *im;
  if (p["dataset"].contains(labels)) {
    auto lb = hash_at(p["dataset"], labels.c_str(), prefix + ".dataset." + labels);
    if (!lb.ok()) return lb.status();
    in.labels = *lb;
  }
  return in;
}

}  // namespace

Result<std::vector<TaskSpec>> InferApp::Plan(const JobSpec& spec) const {
  if (IsScriptInfer(spec.params)) return PlanScriptInfer(spec, kMaxShards);
  FieldReader f(spec.params, "params");
  CLAW_RETURN_IF_ERROR(f.NoUnknownFields({"model", "dataset", "split", "shards", "threads"}));
  auto in = ReadInputs(spec.params, "params");
  if (!in.ok()) return in.status();
  auto shards = f.Integer("shards", 1, kMaxShards, spec.tasks ? spec.tasks : 10);
  auto threads = f.Integer("threads", 1, 256, 1);
  if (!shards.ok()) return shards.status();
  if (!threads.ok()) return threads.status();
  std::vector<TaskSpec> out;
  for (int64_t i = 0; i < *shards; ++i) {
    json t = {{"model", in->model}, {"images", in->images}, {"labels", in->labels},
              {"shard", i},         {"shards", *shards},    {"threads", *threads}};
    out.push_back(TaskSpec{t.dump(), 1e9});  // ~0.3 s of a slot: inference is cheap
  }
  return out;
}

Result<std::string> InferApp::Run(std::string_view task_params, const RunContext& ctx) const {
  json p = json::parse(task_params, nullptr, false);
  if (IsScriptInfer(p)) return RunScriptInfer(p, ctx);
  if (!p.is_object() || !p.contains("model") || !p.contains("images")) {
    return InvalidArgument("infer task: malformed parameters");
  }
  if (!ctx.blobs) return FailedPrecondition("infer task: this worker has no blob cache");
  std::string model = p.value("model", ""), images = p.value("images", ""), labels = p.value("labels", "");
  for (const std::string& h : {model, images}) {
    if (!ctx.blobs->Has(h)) return FailedPrecondition("infer task: blob " + h + " was not fetched");
  }
  int64_t shard = p.value("shard", int64_t{0}), shards = std::max<int64_t>(1, p.value("shards", int64_t{1}));
  auto lib = ml::LoadMl();
  if (!lib.ok()) return lib.status();
  auto count = (*lib)->count_images(ctx.blobs->PathOf(images));
  if (!count.ok()) return count.status();
  const size_t n = *count;
  size_t begin = static_cast<size_t>(shard) * n / static_cast<size_t>(shards);
  size_t end = static_cast<size_t>(shard + 1) * n / static_cast<size_t>(shards);
  if (begin == end) {  // more shards than images
    return json{{"shard", shard}, {"begin", begin}, {"end", end}, {"predictions", ""},
                {"seconds", 0.0}, {"correct", 0}}
        .dump();
  }
  auto r = (*lib)->predict(ctx.blobs->PathOf(model), ctx.blobs->PathOf(images),
                       labels.empty() ? "" : ctx.blobs->PathOf(labels), begin, end,
                       p.value("threads", 1));
  if (!r.ok()) return r.status();
  std::string digits(r->labels.size(), '0');
  for (size_t i = 0; i < r->labels.size(); ++i) digits[i] = static_cast<char>('0' + r->labels[i]);
  json out = {{"shard", shard}, {"begin", begin}, {"end", end}, {"predictions", digits},
              {"seconds", r->seconds}};
  if (r->accuracy >= 0) {
    out["correct"] = static_cast<int64_t>(r->accuracy * static_cast<double>(end - begin) + 0.5);
  }
  return out.dump();
}

Result<json> InferApp::Merge(const JobSpec& spec, const std::vector<std::string_view>& outputs) const {
  if (IsScriptInfer(spec.params)) {
    std::vector<json> parsed;
    parsed.reserve(outputs.size());
    for (std::string_view o : outputs) parsed.push_back(json::parse(o, nullptr, false));
    return MergeScriptInfer(parsed);
  }
  std::string predictions;
  int64_t correct = 0;
  bool labelled = true;
  double seconds = 0;
  for (std::string_view o : outputs) {
    json t = json::parse(o, nullptr, false);
    if (!t.is_object() || !t.contains("predictions")) return InvalidArgument("an infer task's output is malformed");
    predictions += t["predictions"].get<std::string>();
    seconds += t.value("seconds", 0.0);
    if (t.contains("correct")) {
      correct += t["correct"].get<int64_t>();
    } else {
      labelled = false;
    }
  }
  json out = {{"count", predictions.size()}, {"predictions", predictions},
              {"images_per_second", seconds > 0 ? static_cast<double>(predictions.size()) / seconds : 0}};
  if (labelled && !predictions.empty()) {
    out["accuracy"] = static_cast<double>(correct) / static_cast<double>(predictions.size());
  }
  return out;
}

bool InferApp::Equivalent(std::string_view, std::string_view a, std::string_view b) const {
  json x = json::parse(a, nullptr, false), y = json::parse(b, nullptr, false);
  if (x.is_object() && y.is_object() && x.contains("files") && y.contains("files")) {
    return ScriptInferAgree(x, y, kAgreement);
  }
  if (!x.is_object() || !y.is_object() || !x.contains("predictions") || !y.contains("predictions") ||
      x.value("begin", -1) != y.value("begin", -1) || x.value("end", -1) != y.value("end", -1)) {
    return a == b;
  }
  const std::string &p = x["predictions"].get_ref<const std::string&>(),
                    &q = y["predictions"].get_ref<const std::string&>();
  if (p.size() != q.size()) return false;
  if (p.empty()) return true;
  size_t same = 0;
  for (size_t i = 0; i < p.size(); ++i) same += p[i] == q[i];
  return static_cast<double>(same) >= kAgreement * static_cast<double>(p.size());
}

Status InferApp::Runnable() const { return ml::FindMl().status(); }

std::vector<std::string> InferApp::SpecInputBlobs(const JobSpec& spec) const {
  if (IsScriptInfer(spec.params)) return ScriptInferBlobs(spec.params);
  auto in = ReadInputs(spec.params, "params");
  if (!in.ok()) return {};
  std::vector<std::string> out = {in->model, in->images};
  if (!in->labels.empty()) out.push_back(in->labels);
  return out;
}

std::vector<std::string> InferApp::TaskInputBlobs(std::string_view task_params) const {
  json p = json::parse(task_params, nullptr, false);
  if (IsScriptInfer(p)) return ScriptInferBlobs(p);
  std::vector<std::string> out;
  if (!p.is_object()) return out;
  for (const char* key : {"model", "images", "labels"}) {
    if (p.contains(key) && p[key].is_string() && IsBlobHash(p[key].get_ref<const std::string&>())) {
      out.push_back(p[key]);
    }
  }
  return out;
}

std::vector<std::string> InferApp::OutputBlobs(std::string_view task_output) const {
  return OutputFileBlobs(task_output);  // a script model's predictions
}

std::vector<std::string> InferApp::Needs(const JobSpec& spec) const {
  // A user's module runs only in the sandbox: agents without one get none.
  if (IsScriptInfer(spec.params)) return {"infer", "exec"};
  return {"infer"};
}

}  // namespace claw

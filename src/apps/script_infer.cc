#include "apps/script_infer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "apps/blob_fields.h"
#include "apps/ml_sandbox.h"
#include "common/blobs.h"
#include "core/json_fields.h"
#include "tensors/npy.h"

namespace claw {
namespace {

using nlohmann::json;

Result<std::string> BlobAt(const json& obj, const char* key, const std::string& name) {
  if (!obj.contains(key) || !obj[key].is_string() || !IsBlobHash(obj[key].get_ref<const std::string&>())) {
    return InvalidArgument(name + ": must be a blob's SHA-256");
  }
  return obj[key].get<std::string>();
}

}  // namespace

bool IsScriptInfer(const json& params) { return params.is_object() && params.contains("script"); }

Result<std::vector<TaskSpec>> PlanScriptInfer(const JobSpec& spec, int64_t max_shards) {
  const json& p = spec.params;
  FieldReader f(p, "params");
  CLAW_RETURN_IF_ERROR(f.NoUnknownFields({"script", "trainable", "data", "shards", "threads", "batch",
                                          "memory_mb", "timeout_s"}));
  json base = json::object();
  auto script = BlobAt(p, "script", "params.script");
  if (!script.ok()) {
    return InvalidArgument("params.script: must be the TorchScript file's blob SHA-256 (claw submit "
                           "--script FILE uploads it)");
  }
  base["script"] = *script;
  if (p.contains("trainable")) {
    auto t = BlobAt(p, "trainable", "params.trainable");
    if (!t.ok()) return t.status();
    base["trainable"] = *t;
  }
  if (!p.contains("data") || !p["data"].is_object()) {
    return InvalidArgument("params.data: {\"inputs\"[, \"targets\"]} as .npy blobs is required "
                           "(claw submit --data DIR uploads DIR/inputs.npy and DIR/targets.npy)");
  }
  const json& data = p["data"];
  for (const auto& [key, value] : data.items()) {
    if (key != "inputs" && key != "targets") {
      return InvalidArgument("params.data." + key.substr(0, 64) + ": unknown (inputs, targets)");
    }
    auto h = BlobAt(data, key.c_str(), "params.data." + key);
    if (!h.ok()) return h.status();
    base[key] = *h;
  }
  if (!base.contains("inputs")) return InvalidArgument("params.data.inputs: required");
  FieldsInto put(base);
  auto shards = f.Integer("shards", 1, max_shards, spec.tasks ? spec.tasks : 10);
  put("threads", f.Integer("threads", 1, 256, 1));
  put("batch", f.Integer("batch", 1, 1 << 20, 1000));
  put("memory_mb", f.Integer("memory_mb", 256, 1 << 20, 4096));
  put("timeout_s", f.Integer("timeout_s", 1, 7 * 86400, 3600));
  put("shards", shards);
  CLAW_RETURN_IF_ERROR(put.status());
  std::vector<TaskSpec> out;
  for (int64_t i = 0; i < *shards; ++i) {
    json t = base;
    t["shard"] = i;
    out.push_back(TaskSpec{t.dump(), 1e9});
  }
  return out;
}

Result<std::string> RunScriptInfer(const json& t, const RunContext& ctx) {
  for (const char* key : {"script", "inputs", "shard", "shards", "threads", "batch", "memory_mb", "timeout_s"}) {
    if (!t.contains(key)) return InvalidArgument(std::string("infer task: no ") + key);
  }
  if (!ctx.blobs) return FailedPrecondition("infer task: this worker has no blob cache");
  const std::string inputs = t["inputs"].get<std::string>();
  // The rows, from the header alone (the sandbox reads the data).
  auto header = tensors::ReadNpyHeader(ctx.blobs->PathOf(inputs));
  if (!header.ok()) return InvalidArgument("inputs: " + header.status().message());
  if (header->shape.empty()) return InvalidArgument("inputs: a scalar, not rows of data");
  const auto n = static_cast<uint64_t>(header->shape[0]);
  const auto shard = t["shard"].get<uint64_t>(), shards = std::max<uint64_t>(1, t["shards"].get<uint64_t>());
  const uint64_t begin = shard * n / shards, end = (shard + 1) * n / shards;
  json out = {{"shard", shard}, {"begin", begin}, {"end", end}, {"classes", json::array()}, {"seconds", 0.0}};
  if (begin == end) return out.dump();  // more shards than rows

  MlSandboxRun run;
  run.inputs["model.pt"] = t["script"].get<std::string>();
  run.inputs["data/inputs.npy"] = inputs;
  run.request = {{"op", "predict"}, {"model", "model.pt"}, {"inputs", "data/inputs.npy"},
                 {"begin", begin},  {"end", end},          {"batch", t["batch"]},
                 {"threads", t["threads"]}};
  if (t.contains("targets")) {
    run.inputs["data/targets.npy"] = t["targets"].get<std::string>();
    run.request["targets"] = "data/targets.npy";
  }
  if (t.contains("trainable")) {
    run.inputs["trainable.safetensors"] = t["trainable"].get<std::string>();
    run.request["trainable_from"] = "trainable.safetensors";
  }
  run.outputs = {"out/predictions.npy"};
  run.limits = MlLimits(t["timeout_s"].get<uint64_t>(), t["threads"].get<uint64_t>(),
                        t["memory_mb"].get<uint64_t>(), ctx);
  auto r = RunMlSandboxed(run, ctx);
  if (!r.ok()) return r.status();
  const json& res = r->result;
  if (res.value("begin", uint64_t{0}) != begin || res.value("end", uint64_t{0}) != end) {
    return InvalidArgument("the ML runner predicted other rows than asked");
  }
  const json classes = res.value("classes", json::array());
  if (!classes.is_array() || (!classes.empty() && classes.size() != end - begin)) {
    return InvalidArgument("the ML runner returned classes for other rows than asked");
  }
  out["classes"] = classes;
  out["seconds"] = res.value("seconds", 0.0);
  if (res.contains("accuracy") && res["accuracy"].is_number()) {
    out["correct"] = std::llround(res["accuracy"].get<double>() * static_cast<double>(end - begin));
    out["loss"] = res.value("loss", json(nullptr));
  }
  auto file = r->files.find("out/predictions.npy");
  if (file == r->files.end()) return InvalidArgument("the ML runner saved no predictions");
  char name[64];
  std::snprintf(name, sizeof name, "predictions/shard-%05llu.npy", static_cast<unsigned long long>(shard));
  out["files"] = json::array({{{"path", name}, {"sha256", file->second["sha256"]}, {"size", file->second["size"]}}});
  return out.dump();
}

Result<json> MergeScriptInfer(const std::vector<json>& outputs) {
  json classes = json::array(), files = json::array();
  uint64_t rows = 0;
  int64_t correct = 0;
  double loss = 0, seconds = 0;
  bool labelled = true, classified = true;
  for (const json& t : outputs) {
    if (!t.is_object() || !t.contains("begin") || !t.contains("end")) {
      return InvalidArgument("an infer task's output is malformed");
    }
    const uint64_t k = t["end"].get<uint64_t>() - t["begin"].get<uint64_t>();
    if (k == 0) continue;
    rows += k;
    seconds += t.value("seconds", 0.0);
    const json& c = t.value("classes", json::array());
    classified = classified && c.is_array() && c.size() == k;
    if (classified) classes.insert(classes.end(), c.begin(), c.end());
    if (t.contains("correct") && t["loss"].is_number()) {
      correct += t["correct"].get<int64_t>();
      loss += t["loss"].get<double>() * static_cast<double>(k);
    } else {
      labelled = false;
    }
    for (const json& f : t.value("files", json::array())) files.push_back(f);
  }
  json out = {{"count", rows},
              {"files", files},
              {"rows_per_second", seconds > 0 ? static_cast<double>(rows) / seconds : 0}};
  if (classified && rows > 0) out["predictions"] = classes;
  if (labelled && rows > 0) {
    out["accuracy"] = static_cast<double>(correct) / static_cast<double>(rows);
    out["loss"] = loss / static_cast<double>(rows);
  }
  return out;
}

bool ScriptInferAgree(const json& a, const json& b, double agreement) {
  if (a.value("begin", -1) != b.value("begin", -1) || a.value("end", -1) != b.value("end", -1)) return false;
  const json &p = a.value("classes", json::array()), &q = b.value("classes", json::array());
  if (p.size() != q.size()) return false;
  if (!p.empty()) {
    size_t same = 0;
    for (size_t i = 0; i < p.size(); ++i) same += p[i] == q[i];
    return static_cast<double>(same) >= agreement * static_cast<double>(p.size());
  }
  if (a.contains("loss") && a["loss"].is_number() && b.contains("loss") && b["loss"].is_number()) {
    double x = a["loss"], y = b["loss"];
    return std::abs(x - y) <= 1e-3 * std::max({1.0, std::abs(x), std::abs(y)});
  }
  return OutputFileBlobs(a) == OutputFileBlobs(b);  // nothing else to compare: the same bytes
}

std::vector<std::string> ScriptInferBlobs(const json& p) {
  if (!p.is_object()) return {};
  std::vector<std::string> out = BlobHashesIn(p);  // a task's params
  if (p.contains("data")) {                        // a spec's
    for (std::string& h : BlobHashesIn(p["data"])) out.push_back(std::move(h));
  }
  return out;
}

}  // namespace claw

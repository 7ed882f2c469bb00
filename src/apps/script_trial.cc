#include "apps/script_trial.h"

#include "apps/blob_fields.h"
#include "apps/ml_sandbox.h"
#include "common/blobs.h"
#include "core/json_fields.h"
#include "core/model_data.h"

namespace claw {
namespace {

using nlohmann::json;

}  // namespace

bool IsScriptTrial(const json& params) { return params.is_object() && params.contains("script"); }

Result<json> CheckScriptTrial(const json& params, const std::string& prefix) {
  if (!params.is_object()) return InvalidArgument(prefix + ": must be an object");
  FieldReader f(params, prefix);
  for (const char* builtin : {"model", "width", "layers", "dropout", "dataset"}) {
    if (params.contains(builtin)) {
      return InvalidArgument(prefix + "." + builtin + ": not for a script model (" + prefix +
                             ".script names the model)");
    }
  }
  CLAW_RETURN_IF_ERROR(f.NoUnknownFields({"script", "data", "lr", "batch", "epochs", "optimizer",
                                          "momentum", "weight_decay", "seed", "train_limit",
                                          "test_limit", "threads", "eval_batch", "memory_mb",
                                          "timeout_s", "save_model", "trainable", "resume", "block"}));
  json out = json::object();
  if (!params["script"].is_string() || !IsBlobHash(params["script"].get_ref<const std::string&>())) {
    return InvalidArgument(prefix + ".script: must be the TorchScript file's blob SHA-256 "
                           "(claw submit --script FILE uploads it)");
  }
  out["script"] = params["script"];
  auto data = CheckModelData(params, prefix, false);
  if (!data.ok()) return data.status();
  out["data"] = data->data;
  if (data->block > 0) out["block"] = data->block;
  // Each field read with its default; the first error is the answer.
  FieldsInto put(out);
  put("lr", f.Number("lr", 1e-9, 10, 1e-3));
  put("batch", f.Integer("batch", 1, 65536, 64));
  put("epochs", f.Integer("epochs", 1, 1000, 1));
  put("optimizer", f.OneOf("optimizer", {"adamw", "adam", "sgd"}, "adamw"));
  put("momentum", f.Number("momentum", 0, 0.999, 0.9));
  put("weight_decay", f.Number("weight_decay", 0, 1, 0));
  put("seed", f.Integer("seed", 0, int64_t{1} << 53, 1));
  put("train_limit", f.Integer("train_limit", 0, int64_t{1} << 40, 0));
  put("test_limit", f.Integer("test_limit", 0, int64_t{1} << 40, 0));
  put("threads", f.Integer("threads", 1, 256, 1));
  put("eval_batch", f.Integer("eval_batch", 1, 1 << 20, DefaultEvalBatch(data->block)));
  put("memory_mb", f.Integer("memory_mb", 256, 1 << 20, 4096));
  put("timeout_s", f.Integer("timeout_s", 1, 7 * 86400, 3600));
  CLAW_RETURN_IF_ERROR(put.status());
  if (params.contains("save_model")) {
    if (!params["save_model"].is_boolean()) return InvalidArgument(prefix + ".save_model: true or false");
    out["save_model"] = params["save_model"];
  }
  if (params.contains("trainable")) {  // start from trained parameters
    const json& t = params["trainable"];
    if (!t.is_string() || !IsBlobHash(t.get_ref<const std::string&>())) {
      return InvalidArgument(prefix + ".trainable: must be a trainable.safetensors blob's SHA-256");
    }
    out["trainable"] = t;
  }
  if (params.contains("resume")) {  // a trial's "resume" output: go on from there
    const json& r = params["resume"];
    if (!r.is_object() || r.size() != 2 || !r.contains("trainable") || !r.contains("state")) {
      return InvalidArgument(prefix + ".resume: {\"trainable\", \"state\"} as a finished trial "
                             "gives them");
    }
    for (const auto& [key, hash] : r.items()) {
      if (!hash.is_string() || !IsBlobHash(hash.get_ref<const std::string&>())) {
        return InvalidArgument(prefix + ".resume." + key + ": must be a blob's SHA-256");
      }
    }
    if (params.contains("trainable")) {
      return InvalidArgument(prefix + ".trainable: not with resume (which names the parameters)");
    }
    out["resume"] = r;
  }
  return out;
}

Result<std::string> RunScriptTrial(const json& t, const RunContext& ctx) {
  MlSandboxRun run;
  run.inputs["model.pt"] = t["script"].get<std::string>();
  json data = json::object();
  for (const auto& [key, hash] : t["data"].items()) {
    if (!hash.is_string()) return InvalidArgument("train task: data." + key.substr(0, 64) + " is not a blob");
    run.inputs["data/" + ModelDataFile(key)] = hash.get<std::string>();
    data[key] = "data/" + ModelDataFile(key);
  }
  run.request = {{"op", "train"}, {"model", "model.pt"}, {"data", data}, {"block", t.value("block", 0)}};
  if (t.contains("resume")) {
    run.inputs["resume/trainable.safetensors"] = t["resume"]["trainable"].get<std::string>();
    run.inputs["resume/state.pt"] = t["resume"]["state"].get<std::string>();
    run.request["trainable_from"] = "resume/trainable.safetensors";
    run.request["state_from"] = "resume/state.pt";
  } else if (t.contains("trainable")) {
    run.inputs["start/trainable.safetensors"] = t["trainable"].get<std::string>();
    run.request["trainable_from"] = "start/trainable.safetensors";
  }
  for (const char* key : {"optimizer", "lr", "momentum", "weight_decay", "batch", "epochs", "eval_batch",
                          "seed", "train_limit", "test_limit", "threads"}) {
    run.request[key] = t[key];
  }
  const bool save = t.value("save_model", true);
  if (save) run.outputs = {"out/trainable.safetensors", "out/state.pt"};
  run.limits = MlLimits(t["timeout_s"].get<uint64_t>(), t["threads"].get<uint64_t>(),
                        t["memory_mb"].get<uint64_t>(), ctx);
  auto r = RunMlSandboxed(run, ctx);
  if (!r.ok()) return r.status();
  const json& res = r->result;
  json params = t;
  params.erase("data");
  json out = {{"params", params},
              {"epochs", res.value("epochs", json::array())},
              {"parameters", res.value("parameters", 0)},
              {"trainable_parameters", res.value("trainable_parameters", 0)},
              {"first_epoch", res.value("first_epoch", 1)}};
  if (!out["epochs"].is_array() || out["epochs"].empty()) {
    return InvalidArgument("the ML runner returned no epochs");
  }
  if (res.value("diverged", false)) {
    out["diverged"] = true;
    out["final"] = {{"epoch", out["epochs"].back().value("epoch", 0)}, {"diverged", true}};
    return out.dump();
  }
  out["final"] = out["epochs"].back();
  if (save) {
    // files: what a user downloads (the trained parameters; with the module
    // they were trained from, the model); resume: what a later rung of a
    // sweep goes on from.
    auto trainable = r->files.find("out/trainable.safetensors");
    auto state = r->files.find("out/state.pt");
    if (trainable == r->files.end() || state == r->files.end()) {
      return InvalidArgument("the ML runner saved no trained parameters");
    }
    out["files"] = json::array({{{"path", "trainable.safetensors"},
                                 {"sha256", trainable->second["sha256"]},
                                 {"size", trainable->second["size"]}}});
    out["resume"] = {{"trainable", trainable->second["sha256"]}, {"state", state->second["sha256"]}};
  }
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::vector<std::string> ScriptTrialBlobs(const json& p) {
  if (!p.is_object()) return {};
  std::vector<std::string> out = p.contains("data") ? BlobHashesIn(p["data"]) : std::vector<std::string>{};
  for (const char* key : {"script", "trainable"}) {
    if (p.contains(key) && p[key].is_string() && IsBlobHash(p[key].get_ref<const std::string&>())) {
      out.push_back(p[key]);
    }
  }
  if (p.contains("resume")) {
    for (const std::string& h : BlobHashesIn(p["resume"])) out.push_back(h);
  }
  return out;
}

}  // namespace claw

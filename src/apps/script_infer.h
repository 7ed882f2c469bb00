// An infer job over a user's TorchScript module (the infer app's params
// with "script"; docs/models.md): forward on the rows of an .npy file,
// split into shards, each run in the sandbox (apps/ml_sandbox.h).
//
// params:
//   script      the TorchScript file's blob (with a forward method)
//   trainable   optional: trained parameters for it (a train job's
//               trainable.safetensors; `claw submit --model-of JOB` fills
//               script and trainable in)
//   data        {"inputs"[, "targets"]}: .npy blobs, rows along the first
//               dimension; with targets (and an eval_step), accuracy and loss
//   shards      tasks (default: the job's tasks, else 10), threads, batch
//               (rows per forward call, default 1000), memory_mb (4096),
//               timeout_s (3600)
//
// A task's output: its rows [begin, end), "classes" (for outputs of shape
// [rows, classes], each row's highest), "correct" and "loss" with targets,
// and a file, predictions/shard-NNNNN.npy: forward's outputs (F32).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/app.h"

namespace claw {

bool IsScriptInfer(const nlohmann::json& params);
Result<std::vector<TaskSpec>> PlanScriptInfer(const JobSpec& spec, int64_t max_shards);
Result<std::string> RunScriptInfer(const nlohmann::json& task, const RunContext& ctx);
Result<nlohmann::json> MergeScriptInfer(const std::vector<nlohmann::json>& outputs);
// Whether two replicas' outputs agree: the same rows, and classes (if any)
// agreeing on at least `agreement` of them, else losses within 1e-3.
bool ScriptInferAgree(const nlohmann::json& a, const nlohmann::json& b, double agreement);
// The blobs a spec or a task names.
std::vector<std::string> ScriptInferBlobs(const nlohmann::json& params);

}  // namespace claw

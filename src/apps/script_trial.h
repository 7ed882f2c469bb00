// A train trial of a user's TorchScript module on .npy arrays (the train
// app's params with "script"; docs/models.md).
//
// params:
//   script        the TorchScript file's blob (`claw submit --script FILE`)
//   data          {"train_inputs", "train_targets"[, "test_inputs",
//                 "test_targets"]}: blobs of .npy files, rows along the
//                 first dimension (`--data DIR` uploads DIR's files of
//                 those names)
//   lr, batch, epochs, optimizer ("adamw", "adam", "sgd"), momentum,
//   weight_decay, seed, train_limit, test_limit, threads   as for built-in
//                 models
//   eval_batch    rows per eval_step call (default 1000)
//   memory_mb     the sandbox's memory (default 4096), timeout_s (3600)
//   save_model    keep the trained module (default true)
//
// The task runs in the sandbox (apps/ml_sandbox.h). Its output is the
// built-in trial's ("params", "epochs", "final", "parameters", "files"),
// plus "trainable_parameters" and a second file, trainable.safetensors:
// the trained parameters alone.
#pragma once

#include <nlohmann/json.hpp>

#include "core/app.h"

namespace claw {

// Whether a trial's params are a script trial's.
bool IsScriptTrial(const nlohmann::json& params);

// Checks and fills in defaults; InvalidArgument naming the field.
Result<nlohmann::json> CheckScriptTrial(const nlohmann::json& params, const std::string& prefix);

// Runs a checked trial (the task's output, as JSON text).
Result<std::string> RunScriptTrial(const nlohmann::json& trial, const RunContext& ctx);

// The blobs it needs: the script and the data.
std::vector<std::string> ScriptTrialBlobs(const nlohmann::json& params);

}  // namespace claw

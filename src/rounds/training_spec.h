// A round-based training job's params (app `fedtrain`), validated: what the
// user submits, and what the round driver and each round's tasks read back.
//
//   {"model": "cnn", "width": 32, "layers": 2, "dropout": 0.2,
//      | "script": "<sha256 of a TorchScript module>", "memory_mb": 4096,
//    "init": "<sha256 of a safetensors model>",          (optional)
//    "dataset": {"train_images": sha, ...}
//      | "data": {"train_inputs": sha, ...} (.npy arrays, with a script)
//      | "local_dataset": "name",
//    "split": "iid" | "by_label", "shards": K, "train_limit": 0,
//    "rounds": 20, "workers": 4, "overprovision": 1.5,
//    "quorum": 0.75, "deadline_s": 600, "min_workers": 1,
//    "inner": {"optimizer": "adamw", "lr": 0.001, "batch": 64, "steps": 500,
//              "weight_decay": 0, "momentum": 0.9},
//    "outer": {"optimizer": "nesterov", "lr": 0.7, "momentum": 0.9},
//    "compression": "int8",
//    "aggregation": {"rule": "mean", "trim": 0.1, "max_norm": 0, "norm_factor": 0},
//    "eval_every": 1, "test_limit": 0, "threads": 1, "spot_check": 0,
//    "privacy": {"clip_norm": 1, "noise_multiplier": 1, "delta": 1e-5,
//                "epsilon": 8},                             (rounds/privacy.h)
//    "secure_aggregation": true | {"range": 0.1, "step_s": 60}}
//
// spot_check > 0 runs tasks on two agents and compares what they return
// (RoundApp::Equivalent): always for an agent without a clean record,
// for that share of a trusted agent's tasks (the scheduler's adaptive
// replication and reputation).
//
// A round runs ceil(workers × overprovision) tasks and closes when
// ceil(quorum × workers) have reported, or at deadline_s with at least
// min_workers. Errors name the field ("params.inner.steps: ...").
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "common/status.h"
#include "rounds/aggregation.h"
#include "rounds/privacy.h"

namespace claw::rounds {

struct InnerSpec {
  std::string optimizer = "adamw";
  double lr = 1e-3;
  int batch = 64;
  int steps = 100;
  double weight_decay = 0;
  double momentum = 0.9;
};

// Secure aggregation of each round (secagg/protocol.h, docs/privacy.md):
//   "secure_aggregation": true | {"range": r, "step_s": 60}
struct SecureAggSpec {
  bool on = false;
  // Each value of a delta is clamped to ±range before it is quantized to
  // ±127. Default: with privacy 0, worked out from the model's size
  // (rounds/secure_round.h, SecureRange: rounding adds at most a tenth of
  // clip_norm to a delta's norm); else inner.lr × inner.steps (about the
  // most an Adam step moves a weight, per step).
  double range = 0;
  uint32_t step_s = 60;  // how long each protocol step waits for devices
};

struct TrainingSpec {
  // {"model", "width", "layers", "dropout"}, or {"script", "memory_mb"}:
  // a user's module, whose trainable parameters are the model that rounds
  // train (the rest of it, frozen, travels once as the module file).
  nlohmann::json arch;
  std::string init;             // a model blob to start from; empty: the seed's
  nlohmann::json dataset;       // the four blobs (IDX, or .npy with a script), or null
  std::string local_dataset;
  std::string split = "iid";
  uint32_t shards = 0;          // 0 in the input: `workers`
  uint64_t train_limit = 0, test_limit = 0;
  uint32_t rounds = 1;
  uint32_t workers = 1;
  double overprovision = 1.0;
  double quorum = 1.0;
  uint32_t deadline_s = 3600;
  uint32_t min_workers = 1;
  InnerSpec inner;
  OuterSpec outer;
  Codec codec = Codec::kI8;
  Rule rule = Rule::kMean;
  double trim = 0.1;
  CheckSpec check;
  uint32_t eval_every = 1;
  uint32_t threads = 1;
  double spot_check = 0;  // 0: every task runs once
  PrivacySpec privacy;
  SecureAggSpec secagg;

  // With privacy: whether each device is its own unit, counted without
  // amplification (a local dataset), and each shard's chance of taking part
  // in a round at full participation (rounds/privacy.h).
  bool PerDevicePrivacy() const { return !local_dataset.empty(); }
  double SampleRate() const;

  uint32_t TasksPerRound() const;
  uint32_t QuorumTasks() const;  // ceil(quorum × workers), at most the tasks
  // The params again, with every default filled in (what is stored).
  nlohmann::json ToJson() const;
};

// A local dataset's name (agents' config, `dataset:<name>` capabilities):
// 1 to 48 of letters, digits, '-', '_', '.', not starting with '.' (so that
// "dataset:<name>" fits an agent's report of what it runs).
bool IsDatasetName(std::string_view name);

// InvalidArgument naming the field ("params.quorum: ...").
Result<TrainingSpec> ParseTrainingSpec(const nlohmann::json& params);

}  // namespace claw::rounds

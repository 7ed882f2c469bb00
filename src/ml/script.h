// Users' own models: TorchScript modules trained on arrays from .npy files
// (docs/models.md has the contract; ADR 0008 why it runs only sandboxed).
//
// The contract: a module saved by torch.jit.script(m).save(path) exporting
//   training_step(inputs: Tensor, targets: Tensor) -> Tensor
//       the batch's mean loss (a scalar), to minimize;
//   eval_step(inputs: Tensor, targets: Tensor) -> Tuple[Tensor, Tensor, Tensor]
//       (loss summed over the batch, items right, items counted): accuracy
//       is right / counted, test loss the sum / counted;
//   forward(inputs) -> Tensor   optional: inference (`infer`).
// Parameters with requires_grad are trained and travel; the rest (a frozen
// base) stays as loaded. Inputs and targets reach the methods as the .npy
// files hold them (dtype and all), a batch of rows at a time; from token
// files, windows of tokens as int64 [rows, block].
//
// Running a module runs its author's code (TorchScript can read and write
// files: torch.from_file, torch.save), so these entry points are called only
// inside the sandbox (agent/ml_sandbox.h), never in a worker, the agent or
// the coordinator.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "ml/trainer.h"

namespace claw::ml {

// What a module offers, checked against the contract.
struct ScriptReport {
  bool training_step = false, eval_step = false, forward = false;
  int64_t parameters = 0;   // all of them
  int64_t trainable = 0;    // with requires_grad
  std::vector<std::string> trainable_names;
};

// The files of an array dataset: rows along the first dimension, inputs and
// targets row for row. Test files optional (no evaluation without them).
// Or a language model's token files (tensors/tokens.h) instead, read as
// rows of `block` tokens: the inputs, and as targets the same tokens one
// later (each one's next token), as int64.
struct ArrayFiles {
  std::string train_inputs, train_targets, test_inputs, test_targets;
  std::string train_tokens, test_tokens;
  int64_t block = 0;

  bool HasTest() const { return !test_inputs.empty() || !test_tokens.empty(); }
};

struct ScriptTrainConfig {
  std::string model;  // the TorchScript file
  // Optional: trainable parameters to start from (safetensors, as
  // ScriptTrainOutcome::trainable), replacing the module's own; and the
  // optimizer's state with the epochs done (ScriptTrainOutcome::state):
  // training resumes after them, as if never stopped.
  std::string trainable_from, state_from;
  ArrayFiles data;
  std::string optimizer = "adamw";  // "adamw", "adam" or "sgd" (with momentum)
  double lr = 1e-3;
  double momentum = 0.9;
  double weight_decay = 0;
  int batch = 64;
  int epochs = 1;
  int eval_batch = 1000;
  uint64_t seed = 1;
  size_t train_limit = 0, test_limit = 0;  // first N rows (0: all)
  int threads = 1;
};

struct ScriptTrainOutcome {
  std::vector<EpochMetrics> epochs;  // accuracy on training batches is -1 (not measured)
  int first_epoch = 1;               // the first of `epochs` (after a resume, later)
  ScriptReport report;
  // The trained parameters alone (safetensors, F32, sorted by name): with
  // the module file they were trained from, the whole trained model. A
  // frozen base never travels back.
  std::string trainable;
  std::string state;      // the optimizer's state and the epochs done (libtorch archive)
  bool diverged = false;  // as TrainOutcome's
};

struct ScriptPredictConfig {
  std::string model, trainable_from;  // as ScriptTrainConfig's
  std::string inputs, targets;        // .npy files; targets optional (then no accuracy)
  size_t begin = 0, end = 0;          // rows [begin, end); end 0: to the last
  int batch = 1000;
  int threads = 1;
};

struct ScriptPredictions {
  size_t begin = 0, end = 0;  // the rows predicted
  // forward's outputs for the rows, stacked (an .npy file, F32).
  std::string outputs_npy;
  // For outputs of shape [rows, classes]: each row's highest class.
  std::vector<int64_t> classes;
  // With targets and an eval_step: the rows' mean loss and accuracy.
  double loss = -1, accuracy = -1;
  double seconds = 0;  // forward's time
};

// One task of a round of round-based training (rounds/, fedtrain) on a
// user's module: the round's model is the module's trainable parameters
// (safetensors, as ScriptTrainOutcome::trainable); the rest of the module,
// frozen, comes with the module file.
struct ScriptRoundConfig {
  std::string model;  // the TorchScript file
  std::string start;  // the round's trainable parameters
  ArrayFiles data;
  ShardSpec shard;    // of the training rows
  int steps = 0;      // inner steps (0: evaluate only)
  int batch = 64;
  std::string optimizer = "adamw";  // "adamw" or "sgd"; fresh each round
  double lr = 1e-3, momentum = 0.9, weight_decay = 0;
  uint64_t seed = 1;  // the batches' order
  int threads = 1;
  size_t eval_begin = 0, eval_end = 0;  // test rows to evaluate `start` on first
  int eval_batch = 1000;
};

struct ScriptRoundOutcome {
  std::string trained;  // the trainable parameters after the steps (empty if none)
  double samples = 0, train_loss = 0, seconds = 0;
  double eval_loss_sum = 0;
  int64_t eval_correct = 0, eval_count = 0;
};

// InvalidArgument naming what the module lacks, or why it cannot be read.
Result<ScriptReport> InspectScript(const std::string& model_path);

// The module's own trainable parameters (safetensors, F32, sorted by name):
// a round-based training's first model. Checks the contract.
Result<std::string> ScriptTrainable(const std::string& model_path);

Result<ScriptRoundOutcome> ScriptRound(const ScriptRoundConfig& config);

// InvalidArgument naming the fault: the contract, the data (shapes that
// disagree, unreadable files), or the module's own error with its message.
Result<ScriptTrainOutcome> TrainScript(const ScriptTrainConfig& config);

// Runs forward (and eval_step, with targets) on rows of `inputs`.
// InvalidArgument as TrainScript's, or when the module has no forward.
Result<ScriptPredictions> PredictScript(const ScriptPredictConfig& config);

}  // namespace claw::ml

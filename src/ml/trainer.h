// Training and evaluating Fashion-MNIST classifiers with libtorch.
//
// This is the only place that includes torch (its headers cost ~1.5 GB and
// 15 s per file to compile); callers see plain structs. Everything runs on
// the calling thread plus `threads` intra-op threads.
//
// Determinism: for one seed, on one machine with one thread count, a run
// gives bit-identical metrics and weights. Each epoch draws its shuffle and
// its dropout masks from (seed, epoch) alone, so training to epoch k, saving
// a checkpoint and resuming to epoch n gives the same result as training to
// n in one go: what ASHA's promotions rely on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "rounds/weights.h"  // the Named struct only: this library links no claw_rounds

namespace claw::ml {

// The four files of the IDX distribution (gzipped or not), by path.
struct DatasetFiles {
  std::string train_images, train_labels, test_images, test_labels;
};

struct TrainConfig {
  std::string model = "cnn";  // "cnn" or "mlp"
  int width = 32;             // cnn: channels of the first conv; mlp: units per hidden layer
  int layers = 2;             // cnn: conv layers (the first two pool); mlp: hidden layers
  double dropout = 0.2;
  double lr = 0.01;
  int batch = 64;
  int epochs = 1;             // train until this epoch (a checkpoint may have done some)
  std::string optimizer = "sgd";  // "sgd" (with momentum) or "adam"
  double momentum = 0.9;
  double weight_decay = 0;
  uint64_t seed = 1;
  size_t train_limit = 0;     // use the first N training images (0: all 60,000)
  size_t test_limit = 0;      // evaluate on the first N test images (0: all 10,000)
  int threads = 1;            // torch intra-op threads
  DatasetFiles data;
  std::string resume_from;    // a checkpoint file to continue from; empty: start afresh
};

struct EpochMetrics {
  int epoch = 0;
  double loss = 0;           // mean training loss over the epoch
  double accuracy = 0;       // on the training batches, as trained
  double test_loss = 0;
  double test_accuracy = 0;
  double seconds = 0;        // wall time of the epoch's training
};

struct TrainOutcome {
  std::vector<EpochMetrics> epochs;  // the ones this run trained (after a resume: the rest)
  int first_epoch = 1;               // 1, or one past the checkpoint's
  std::string checkpoint;            // model + optimizer + epoch, libtorch's serialization
  int64_t parameters = 0;
  // The loss stopped being finite (too high a learning rate): training
  // stopped at the last epoch listed, and there is no checkpoint. A result
  // of a sweep, not an error.
  bool diverged = false;
};

// InvalidArgument for a bad config (naming the field) or unreadable data
// or checkpoint.
Result<TrainOutcome> Train(const TrainConfig& config);

struct Predictions {
  std::vector<uint8_t> labels;  // predicted class per image
  double accuracy = -1;         // against the file's labels; -1 without labels
  double seconds = 0;
};

// How many images an IDX image file holds (it stays decoded in memory for
// the next call).
Result<size_t> CountImages(const std::string& images);

// Runs a checkpoint's model over images [begin, end) of an IDX image file
// (labels optional). The checkpoint says which model it holds.
Result<Predictions> Predict(const std::string& checkpoint_path, const std::string& images,
                            const std::string& labels, size_t begin, size_t end, int threads);

// ---- round-based training (docs/adr/0007-training-in-rounds.md) ----------

struct Arch {
  std::string model = "cnn";  // as TrainConfig
  int width = 32;
  int layers = 2;
  double dropout = 0.2;
};

// Which training images a task trains on: shard `shard` of `shards`, cut
// from the first `limit` images (0: all) either at random (iid: one fixed
// shuffle by `data_seed`, the same in every round) or by label (by_label:
// the images sorted by label, then cut, so each shard sees few classes: a
// non-IID split for experiments).
struct ShardSpec {
  size_t shard = 0;
  size_t shards = 1;
  std::string split = "iid";  // "iid" or "by_label"
  uint64_t data_seed = 1;
  size_t limit = 0;
};

struct RoundConfig {
  Arch arch;
  rounds::Weights start;  // the round's model (names and shapes as the arch's)
  DatasetFiles data;      // test files only needed for the evaluation
  ShardSpec shard;
  int steps = 0;          // inner steps (0: evaluate only)
  int batch = 64;
  std::string optimizer = "adamw";  // "adamw" or "sgd" (with momentum); fresh each round
  double lr = 1e-3;
  double momentum = 0.9;
  double weight_decay = 0;
  uint64_t seed = 1;      // the batches' order and dropout
  int threads = 1;
  // Evaluate `start` on test images [eval_begin, eval_end) first (none if
  // equal).
  size_t eval_begin = 0, eval_end = 0;
};

struct RoundOutcome {
  rounds::Weights weights;  // after the steps (empty when steps is 0)
  double samples = 0;       // images trained on (steps × batch)
  double train_loss = 0;    // mean over the steps
  double eval_loss_sum = 0;
  int64_t eval_correct = 0, eval_count = 0;
  double seconds = 0;       // of training
};

// The arch's initial weights for a seed, by name (libtorch's own init).
Result<rounds::Weights> InitModel(const Arch& arch, uint64_t seed);
// InvalidArgument naming what is wrong (weights that do not fit the arch,
// a shard outside the data, unreadable files).
Result<RoundOutcome> TrainRound(const RoundConfig& config);
// A checkpoint (as TrainOutcome's, for Predict) of `weights` for the arch.
Result<std::string> CheckpointOf(const Arch& arch, const rounds::Weights& weights);

}  // namespace claw::ml

// The ML library (libclaw_ml.so: trainer.h over libtorch), loaded on first
// use.
//
// libtorch is large (~340 shared libraries, 150 MB resident once loaded), and
// every worker process, the coordinator and the CLI would carry it if `claw`
// linked it; measurably, even a Monte Carlo task ran ~1.5% slower in such a
// worker. So only processes that run a train or infer task load it, with
// dlopen, from: $CLAW_ML_LIBRARY, else libclaw_ml.so beside the executable,
// else where the build put it.
#pragma once

#include "ml/script.h"
#include "ml/trainer.h"

namespace claw::ml {

struct MlApi {
  int version;  // kMlApiVersion
  Result<TrainOutcome> (*train)(const TrainConfig& config);
  Result<Predictions> (*predict)(const std::string& checkpoint_path, const std::string& images,
                                 const std::string& labels, size_t begin, size_t end, int threads);
  Result<size_t> (*count_images)(const std::string& images);
  Result<rounds::Weights> (*init_model)(const Arch& arch, uint64_t seed);
  Result<RoundOutcome> (*train_round)(const RoundConfig& config);
  Result<std::string> (*checkpoint_of)(const Arch& arch, const rounds::Weights& weights);
  // Users' TorchScript modules (script.h): only ever called in a sandbox.
  Result<ScriptReport> (*inspect_script)(const std::string& model_path);
  Result<ScriptTrainOutcome> (*train_script)(const ScriptTrainConfig& config);
  Result<ScriptPredictions> (*predict_script)(const ScriptPredictConfig& config);
  Result<std::string> (*script_trainable)(const std::string& model_path);
  Result<ScriptRoundOutcome> (*script_round)(const ScriptRoundConfig& config);
};
inline constexpr int kMlApiVersion = 4;

// OpenMP threads that wait for work sleep instead of spinning. libgomp's
// default spins at every barrier: on a machine whose other work holds the
// cores (its owner's, another slot's task), a spinning thread burns the
// time slice its partner needs; a 2-thread step of the example language
// model measured 25x slower than a 1-thread one that way, and no slower
// sleeping. libgomp reads the setting when libtorch loads it; setenv is
// not thread-safe, so main() calls this before any thread starts. A value
// the user set stays.
void SleepingOpenMpThreads();

// The library's entry points. FailedPrecondition saying where it looked and
// why it failed when it cannot be loaded (e.g. an agent without libtorch).
// Thread-safe; loads once per process.
Result<const MlApi*> LoadMl();
// Where LoadMl would load the library from, without loading it (cheap: for
// agents saying what they can run). FailedPrecondition if nowhere.
Result<std::string> FindMl();

}  // namespace claw::ml

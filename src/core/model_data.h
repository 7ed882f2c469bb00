// The data of a user's module (docs/models.md), as a job's params name it:
//
//   "data": {"train_inputs": sha, "train_targets": sha,      .npy arrays,
//            "test_inputs": sha, "test_targets": sha}          row for row
//   "data": {"train_tokens": sha, "test_tokens": sha},       token files,
//   "block": 128                                              rows of 128 tokens
//
// `block` (the tokens in a row) is given with token files and only then.
// Used by `train` (and sweeps of it) and `fedtrain`; errors name the field.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace claw {

struct ModelData {
  nlohmann::json data;  // the blobs, by name
  int64_t block = 0;    // > 0: token files
};

// `p`: the params holding "data" (and "block"); `prefix`: their field name
// ("params", "params.base"); `need_test`: the test files are required (a
// training in rounds evaluates on them).
Result<ModelData> CheckModelData(const nlohmann::json& p, const std::string& prefix, bool need_test);

// The rows an evaluation takes at once by default: 1000 of arrays; of
// tokens, 16,384 tokens' worth (a language model's activations grow with
// the tokens: logits alone are tokens × vocabulary).
inline int64_t DefaultEvalBatch(int64_t block) { return block > 0 ? std::max<int64_t>(1, 16384 / block) : 1000; }

// A token file's name in a task's data directory or an agent's local
// dataset: "train.tokens" for "train_tokens"; an array's: "train_inputs.npy".
std::string ModelDataFile(const std::string& key);

}  // namespace claw

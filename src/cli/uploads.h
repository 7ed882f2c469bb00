// What `claw submit` uploads before it sends a spec: a job's input files,
// datasets (IDX directories; .npy, .npz, .safetensors arrays; token files
// or text), and users' modules, each checked on the user's machine first.
// Each throws CLI::RuntimeError(Fail(...)) naming what is wrong.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "cli/client.h"

namespace claw {

// Uploads each --input (FILE, or PATH=FILE); {"PATH": "<sha256>"}.
nlohmann::json UploadInputs(const Client& client, const std::vector<std::string>& inputs);

// The four IDX files of an MNIST-style dataset directory;
// {"train_images": "<sha256>", ...}.
nlohmann::json UploadDataset(const Client& client, const std::string& dir);

// A user's TorchScript module, checked against the contract where the ML
// library is, then uploaded; its blob hash.
std::string UploadScript(const Client& client, const std::string& file, bool for_training);

// Modules a spec file names by path (params.script, params.base.script,
// params.space.script's values), uploaded and replaced by their hashes;
// whether any was.
bool UploadScriptPaths(const Client& client, const std::string& spec_file, nlohmann::json& spec);

// A user's module's data (docs/models.md): the arrays or token files of a
// directory, or an .npz or .safetensors file; for infer, inputs and targets.
nlohmann::json UploadArrays(const Client& client, const std::string& path, bool infer);

}  // namespace claw

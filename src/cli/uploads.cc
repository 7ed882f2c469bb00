#include "cli/uploads.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/command_parts.h"
#include "common/blobs.h"
#include "common/crypto.h"
#include "common/files.h"
#include "ml/api.h"
#include "tensors/npy.h"
#include "tensors/npz.h"
#include "tensors/safetensors.h"
#include "tensors/tokens.h"

namespace claw {
namespace {

// A file the CLI must read (a dataset's), or the command fails naming it.
std::string MustRead(const std::string& path) {
  auto bytes = ReadWholeFile(path);
  if (!bytes.ok()) throw CLI::RuntimeError(Fail(bytes.status()));
  return *bytes;
}

}  // namespace

// Uploads each --input (FILE, or PATH=FILE) and returns {"PATH": "<sha256>"}.
nlohmann::json UploadInputs(const Client& client, const std::vector<std::string>& inputs) {
  BlobClient blobs = client.Blobs();
  nlohmann::json out = nlohmann::json::object();
  for (const std::string& in : inputs) {
    size_t eq = in.find('=');
    std::string file = eq == std::string::npos ? in : in.substr(eq + 1);
    std::string path =
        eq == std::string::npos ? std::filesystem::path(file).filename().string() : in.substr(0, eq);
    auto hash = blobs.UploadFile(file);
    if (!hash.ok()) throw CLI::RuntimeError(Fail(hash.status()));
    std::fprintf(stderr, "uploaded %s  %s\n", file.c_str(), hash->c_str());
    out[path] = *hash;
  }
  return out;
}

// Uploads the four IDX files of an MNIST-style dataset directory and returns
// {"train_images": "<sha256>", ...}.
nlohmann::json UploadDataset(const Client& client, const std::string& dir) {
  const std::pair<const char*, const char*> files[] = {
      {"train_images", "train-images-idx3-ubyte"}, {"train_labels", "train-labels-idx1-ubyte"},
      {"test_images", "t10k-images-idx3-ubyte"},   {"test_labels", "t10k-labels-idx1-ubyte"}};
  std::vector<std::string> inputs;
  for (auto [key, name] : files) {
    std::string path = dir + "/" + name;
    if (!std::filesystem::exists(path)) path += ".gz";
    inputs.push_back(std::string(key) + "=" + path);
  }
  return UploadInputs(client, inputs);
}

// A user's TorchScript module, checked against the contract here (the
// user's own file, on the user's machine: agents run it only sandboxed)
// where the ML library is, then uploaded; its blob hash.
std::string UploadScript(const Client& client, const std::string& file, bool for_training) {
  if (auto lib = for_training ? ml::LoadMl() : Result<const ml::MlApi*>(NotFound("")); lib.ok()) {
    auto report = (*lib)->inspect_script(file);
    if (!report.ok()) throw CLI::RuntimeError(Fail(InvalidArgument(file + ": " + report.status().message())));
    std::fprintf(stderr, "%s: %lld parameters, %lld trainable; training_step%s%s\n", file.c_str(),
                 static_cast<long long>(report->parameters), static_cast<long long>(report->trainable),
                 report->eval_step ? ", eval_step" : " (no eval_step: no test metrics)",
                 report->forward ? ", forward" : "");
  }
  return UploadInputs(client, {"script=" + file})["script"];
}

// A spec file may name TorchScript modules by path where a blob hash goes:
// params.script, a sweep's params.base.script, and each value of a sweep's
// params.space.script (a sweep over modules: LoRA ranks, architectures).
// Each is checked and uploaded, and replaced by its hash; a relative path
// is taken from the spec file's directory. Whether anything was.
bool UploadScriptPaths(const Client& client, const std::string& spec_file, nlohmann::json& spec) {
  const std::filesystem::path dir =
      spec_file == "-" ? std::filesystem::path(".") : std::filesystem::path(spec_file).parent_path();
  bool changed = false;
  auto upload = [&](nlohmann::json& value) {
    if (!value.is_string() || IsBlobHash(value.get_ref<const std::string&>())) return;
    std::filesystem::path path = value.get<std::string>();
    if (path.is_relative()) path = dir / path;
    value = UploadScript(client, path.string(), spec.value("app", "") != "infer");
    changed = true;
  };
  if (!spec.contains("params") || !spec["params"].is_object()) return false;
  nlohmann::json& p = spec["params"];
  if (p.contains("script")) upload(p["script"]);
  if (p.contains("base") && p["base"].is_object() && p["base"].contains("script")) upload(p["base"]["script"]);
  if (p.contains("space") && p["space"].is_object() && p["space"].contains("script") &&
      p["space"]["script"].is_array()) {
    for (auto& v : p["space"]["script"]) upload(v);
  }
  return changed;
}

// Uploads the .npy files of an array dataset directory (train_inputs.npy,
// train_targets.npy and, if there, test_inputs.npy and test_targets.npy);
// {"train_inputs": "<sha256>", ...}.
// For infer, DIR's inputs.npy and targets.npy (or else its test_inputs.npy
// and test_targets.npy) as {"inputs", "targets"}.
nlohmann::json UploadArrays(const Client& client, const std::string& path, bool infer) {
  // An .npz archive is taken apart here: each array goes up as the .npy
  // file it holds (agents read .npy files alone).
  std::string dir = path;
  struct TempDir {
    std::string path;
    ~TempDir() {
      std::error_code ec;
      if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
  } unpacked;
  if (path.ends_with(".npz") && std::filesystem::is_regular_file(path)) {
    auto members = tensors::ReadNpz(MustRead(path));
    if (!members.ok()) throw CLI::RuntimeError(Fail(InvalidArgument("--data " + path + ": " + members.status().message())));
    unpacked.path = (std::filesystem::temp_directory_path() / ("claw-npz-" + RandomHex(6))).string();
    std::filesystem::create_directories(unpacked.path);
    for (const auto& m : *members) {
      std::ofstream(unpacked.path + "/" + m.name + ".npy", std::ios::binary) << m.bytes;
    }
    dir = unpacked.path;
  } else if (path.ends_with(".safetensors") && std::filesystem::is_regular_file(path)) {
    // A safetensors file of arrays by name, each written out as its .npy.
    auto file = tensors::ParseSafetensors(MustRead(path));
    if (!file.ok()) throw CLI::RuntimeError(Fail(InvalidArgument("--data " + path + ": " + file.status().message())));
    unpacked.path = (std::filesystem::temp_directory_path() / ("claw-st-" + RandomHex(6))).string();
    std::filesystem::create_directories(unpacked.path);
    for (const auto& t : file->tensors) {
      if (t.name.empty() || t.name.find_first_of("/\\") != std::string::npos || t.name.starts_with(".")) {
        throw CLI::RuntimeError(Fail(InvalidArgument("--data " + path + ": tensor name '" + t.name.substr(0, 64) +
                                                     "' is not a plain name")));
      }
      auto npy = tensors::WriteNpy(t);
      if (!npy.ok()) throw CLI::RuntimeError(Fail(InvalidArgument("--data " + path + ": " + t.name + ": " + npy.status().message())));
      std::ofstream(unpacked.path + "/" + t.name + ".npy", std::ios::binary) << *npy;
    }
    dir = unpacked.path;
  }
  std::vector<std::string> inputs;
  auto add = [&](const std::string& key, const std::string& name) {
    std::string path = dir + "/" + name + ".npy";
    if (std::filesystem::exists(path)) inputs.push_back(key + "=" + path);
  };
  if (infer) {
    add("inputs", "inputs");
    add("targets", "targets");
    if (inputs.empty()) {
      add("inputs", "test_inputs");
      add("targets", "test_targets");
    }
  } else if (std::filesystem::exists(dir + "/train.tokens") || std::filesystem::exists(dir + "/train.txt")) {
    // A language model's text: token files, or UTF-8 text taken as byte
    // tokens here. Checked before they go up.
    for (const char* split : {"train", "test"}) {
      std::string file = dir + "/" + split + ".tokens";
      const std::string text = dir + "/" + split + ".txt";
      if (!std::filesystem::exists(file) && std::filesystem::exists(text)) {
        if (unpacked.path.empty()) {
          unpacked.path = (std::filesystem::temp_directory_path() / ("claw-text-" + RandomHex(6))).string();
          std::filesystem::create_directories(unpacked.path);
        }
        file = unpacked.path + "/" + split + ".tokens";
        std::ofstream(file, std::ios::binary) << tensors::TextTokenFile(MustRead(text));
      }
      if (!std::filesystem::exists(file)) continue;
      auto h = tensors::CheckTokenFile(MustRead(file));
      if (!h.ok()) throw CLI::RuntimeError(Fail(InvalidArgument(file + ": " + h.status().message())));
      inputs.push_back(std::string(split) + "_tokens=" + file);
    }
  } else {
    for (const char* key : {"train_inputs", "train_targets", "test_inputs", "test_targets"}) add(key, key);
  }
  if (inputs.empty()) {
    throw CLI::RuntimeError(Fail(InvalidArgument(
        "--data " + path + (infer ? ": no inputs.npy (or test_inputs.npy) there"
                                  : ": no train_inputs.npy or train_targets.npy there"))));
  }
  return UploadInputs(client, inputs);
}

}  // namespace claw

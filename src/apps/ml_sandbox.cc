#include "apps/ml_sandbox.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/blobs.h"
#include "common/crypto.h"
#include "common/text.h"
#include "core/model_data.h"
#include "ml/api.h"
#include "sandbox/scratch.h"

namespace claw {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kInside = "/opt/claw";        // where the binary and library appear
constexpr uint64_t kMaxResultBytes = 4 << 20;       // result.json

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

Result<std::string> ReadSmall(const fs::path& p, uint64_t most) {
  std::error_code ec;
  auto st = fs::symlink_status(p, ec);
  if (ec || st.type() != fs::file_type::regular) return InvalidArgument("not a regular file");
  if (fs::file_size(p, ec) > most) return InvalidArgument("larger than " + std::to_string(most) + " bytes");
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Tail(const std::string& s, size_t n) {
  return EscapeControl(s.size() <= n ? s : "..." + s.substr(s.size() - n), TextLayout::kMultiLine);
}

json Finite(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace

SandboxLimits MlLimits(uint64_t timeout_s, uint64_t threads, uint64_t memory_mb, const RunContext& ctx) {
  auto capped = [](uint64_t asked, uint64_t cap) { return cap == 0 ? asked : std::min(asked, cap); };
  SandboxLimits limits;
  limits.wall_time = std::chrono::seconds(timeout_s);
  limits.cpu_seconds = capped(timeout_s * threads, ctx.caps.cpu_seconds);
  limits.memory_bytes = capped(memory_mb << 20, ctx.caps.memory_bytes);
  limits.disk_bytes = capped(limits.disk_bytes, ctx.caps.disk_bytes);
  return limits;
}

Result<MlSandboxOutput> RunMlSandboxed(const MlSandboxRun& run, const RunContext& ctx) {
  if (!ctx.blobs) return FailedPrecondition("this worker has no blob cache");
  auto lib = ml::FindMl();
  if (!lib.ok()) return lib.status();
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return FailedPrecondition("cannot find the claw executable: " + ec.message());

  fs::path scratch = (ctx.scratch_dir.empty() ? fs::temp_directory_path() : fs::path(ctx.scratch_dir)) /
                     ("claw-ml-" + RandomHex(8));
  fs::create_directories(scratch / "out", ec);
  if (ec) return Unavailable("cannot create a scratch directory: " + ec.message());
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { RemoveTree(dir.string()); }
  } cleanup{scratch};
  for (const auto& [path, hash] : run.inputs) {
    // Names come from task params (a dataset's keys): none may leave the scratch directory.
    const fs::path rel(path);
    if (rel.empty() || rel.is_absolute() ||
        std::any_of(rel.begin(), rel.end(), [](const fs::path& part) { return part == ".."; })) {
      return InvalidArgument("input " + path.substr(0, 64) + ": not a path inside the scratch directory");
    }
    fs::create_directories((scratch / path).parent_path(), ec);
    Status st = ctx.blobs->Export(hash, (scratch / path).string());
    if (!st.ok()) return Status(st.code(), path + ": " + st.message());
  }
  {
    std::ofstream f(scratch / "request.json");
    f << run.request.dump();
    if (!f) return Unavailable("cannot write the request in the scratch directory");
  }
  SandboxLimits limits = run.limits;
  limits.uid = ctx.sandbox_uid;
  // As many cores as the request's threads (a cgroup's quota would hold
  // two threads to one core's time: an epoch of the CNN took 1.9x longer).
  limits.cpu_cores = std::max(1, run.request.value("threads", 1));
  limits.limit_address_space = !kAddressSanitizer;  // the runner is this same binary
  limits.read_only.emplace_back(exe.string(), std::string(kInside) + "/claw");
  limits.read_only.emplace_back(fs::absolute(*lib, ec).string(), std::string(kInside) + "/libclaw_ml.so");
  auto r = RunSandboxed({std::string(kInside) + "/claw", "__ml-run"}, scratch.string(), limits, ctx.group);
  if (!r.ok()) return r.status();
  if (r->timed_out) return ResourceExhausted("timed out after " + std::to_string(limits.wall_time.count()) + " s");
  if (!r->killed_for.empty()) {
    return ResourceExhausted("stopped: " + r->killed_for + "; stderr: " + Tail(r->stderr_text, 256));
  }
  auto text = ReadSmall(scratch / "result.json", kMaxResultBytes);
  json result = text.ok() ? json::parse(*text, nullptr, false) : json();
  if (!result.is_object()) {
    std::string how = r->exit_code > 128 ? "killed by signal " + std::to_string(r->exit_code - 128)
                                         : "exit code " + std::to_string(r->exit_code);
    return InvalidArgument("the ML runner ended (" + how + ") without a result; stderr: " +
                           Tail(r->stderr_text, 512));
  }
  if (!result.value("ok", false)) {
    std::string error = result.contains("error") && result["error"].is_string()
                            ? result["error"].get<std::string>()
                            : "failed without saying why";
    return InvalidArgument(EscapeControl(error.substr(0, 2000)));
  }
  MlSandboxOutput out;
  for (const std::string& path : run.outputs) {
    fs::path p = scratch / path;
    auto st = fs::symlink_status(p, ec);
    if (ec || st.type() == fs::file_type::not_found) continue;
    if (st.type() != fs::file_type::regular) return InvalidArgument(path + " is not a regular file; refused");
    auto hash = ctx.blobs->Import(p.string(), limits.file_bytes);
    if (!hash.ok()) return Status(hash.status().code(), path + ": " + hash.status().message());
    out.files[path] = {{"sha256", *hash}, {"size", fs::file_size(ctx.blobs->PathOf(*hash), ec)}};
  }
  out.result = std::move(result);
  return out;
}

// ---- inside the sandbox ------------------------------------------------------

namespace {

// A request's array files ({"train_inputs", ...}: paths in the sandbox).
ml::ArrayFiles ArraysOf(const json& q) {
  const json& d = q.value("data", json::object());
  return {d.value("train_inputs", ""), d.value("train_targets", ""), d.value("test_inputs", ""),
          d.value("test_targets", ""),  d.value("train_tokens", ""),  d.value("test_tokens", ""),
          q.value("block", int64_t{0})};
}

Result<json> RunRequest(const json& q) {
  auto lib = ml::LoadMl();
  if (!lib.ok()) return lib.status();
  const std::string op = q.value("op", "");
  if (op == "inspect") {
    auto r = (*lib)->inspect_script(q.value("model", ""));
    if (!r.ok()) return r.status();
    return json{{"report",
                 {{"training_step", r->training_step},
                  {"eval_step", r->eval_step},
                  {"forward", r->forward},
                  {"parameters", r->parameters},
                  {"trainable", r->trainable},
                  {"trainable_names", r->trainable_names}}}};
  }
  if (op == "predict") {
    ml::ScriptPredictConfig c;
    c.model = q.value("model", "");
    c.trainable_from = q.value("trainable_from", "");
    c.inputs = q.value("inputs", "");
    c.targets = q.value("targets", "");
    c.begin = q.value("begin", size_t{0});
    c.end = q.value("end", size_t{0});
    c.batch = q.value("batch", c.batch);
    c.threads = q.value("threads", c.threads);
    auto r = (*lib)->predict_script(c);
    if (!r.ok()) return r.status();
    json out = {{"begin", r->begin}, {"end", r->end}, {"classes", r->classes}, {"seconds", r->seconds}};
    if (r->accuracy >= 0) {
      out["loss"] = Finite(r->loss);
      out["accuracy"] = r->accuracy;
    }
    std::ofstream("out/predictions.npy", std::ios::binary) << r->outputs_npy;
    return out;
  }
  if (op == "init") {  // a round-based training's first model: the module's own parameters
    auto r = (*lib)->script_trainable(q.value("model", ""));
    if (!r.ok()) return r.status();
    std::ofstream("out/model.safetensors", std::ios::binary) << *r;
    return json::object();
  }
  if (op == "round") {
    ml::ScriptRoundConfig c;
    c.model = q.value("model", "");
    c.start = q.value("start", "");
    c.data = ArraysOf(q);
    c.shard.shard = q.value("shard", size_t{0});
    c.shard.shards = q.value("shards", size_t{1});
    c.shard.split = q.value("split", "iid");
    c.shard.data_seed = q.value("data_seed", uint64_t{1});
    c.shard.limit = q.value("train_limit", size_t{0});
    c.steps = q.value("steps", 0);
    c.batch = q.value("batch", c.batch);
    c.optimizer = q.value("optimizer", c.optimizer);
    c.lr = q.value("lr", c.lr);
    c.momentum = q.value("momentum", c.momentum);
    c.weight_decay = q.value("weight_decay", c.weight_decay);
    c.seed = q.value("seed", c.seed);
    c.threads = q.value("threads", c.threads);
    c.eval_begin = q.value("eval_begin", size_t{0});
    c.eval_end = q.value("eval_end", size_t{0});
    c.eval_batch = q.value("eval_batch", static_cast<int>(DefaultEvalBatch(c.data.block)));
    auto r = (*lib)->script_round(c);
    if (!r.ok()) return r.status();
    if (!r->trained.empty()) std::ofstream("out/trained.safetensors", std::ios::binary) << r->trained;
    return json{{"samples", r->samples},           {"train_loss", r->train_loss},
                {"seconds", r->seconds},           {"eval_loss_sum", r->eval_loss_sum},
                {"eval_correct", r->eval_correct}, {"eval_count", r->eval_count}};
  }
  if (op != "train") return InvalidArgument("ML runner: unknown op " + op.substr(0, 32));
  ml::ScriptTrainConfig c;
  c.model = q.value("model", "");
  c.trainable_from = q.value("trainable_from", "");
  c.state_from = q.value("state_from", "");
  c.data = ArraysOf(q);
  c.optimizer = q.value("optimizer", c.optimizer);
  c.lr = q.value("lr", c.lr);
  c.momentum = q.value("momentum", c.momentum);
  c.weight_decay = q.value("weight_decay", c.weight_decay);
  c.batch = q.value("batch", c.batch);
  c.epochs = q.value("epochs", c.epochs);
  c.eval_batch = q.value("eval_batch", c.eval_batch);
  c.seed = q.value("seed", c.seed);
  c.train_limit = q.value("train_limit", c.train_limit);
  c.test_limit = q.value("test_limit", c.test_limit);
  c.threads = q.value("threads", c.threads);
  auto r = (*lib)->train_script(c);
  if (!r.ok()) return r.status();
  json out = {{"epochs", json::array()},
              {"first_epoch", r->first_epoch},
              {"parameters", r->report.parameters},
              {"trainable_parameters", r->report.trainable},
              {"diverged", r->diverged}};
  for (const auto& m : r->epochs) {
    out["epochs"].push_back({{"epoch", m.epoch},
                             {"loss", Finite(m.loss)},
                             {"test_loss", Finite(m.test_loss)},
                             {"test_accuracy", Finite(m.test_accuracy)},
                             {"seconds", m.seconds}});
  }
  if (!r->diverged) {
    std::ofstream("out/trainable.safetensors", std::ios::binary) << r->trainable;
    std::ofstream("out/state.pt", std::ios::binary) << r->state;
  }
  return out;
}

}  // namespace

int MlRunMain() {
  json result;
  std::ifstream f("request.json");
  json q = json::parse(f, nullptr, false);
  Result<json> r = q.is_object() ? RunRequest(q) : InvalidArgument("ML runner: request.json is not a JSON object");
  if (r.ok()) {
    result = std::move(r).value();
    result["ok"] = true;
  } else {
    result = {{"ok", false}, {"error", r.status().message()}};
  }
  std::ofstream("result.json") << result.dump(-1, ' ', false, json::error_handler_t::replace);
  return r.ok() ? 0 : 2;
}

}  // namespace claw

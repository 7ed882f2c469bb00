#include "rounds/round_app.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "apps/ml_sandbox.h"
#include "common/blobs.h"
#include "common/crypto.h"
#include "core/model_data.h"
#include "ml/api.h"
#include "rounds/training_spec.h"
#include "tensors/npy.h"
#include "tensors/tokens.h"

namespace claw::rounds {
namespace {

using nlohmann::json;

const char* const kDatasetFiles[] = {"train_images", "train_labels", "test_images", "test_labels"};
// The file names of the Fashion-MNIST distribution, for local datasets
// (gzipped or not).
const char* const kLocalFiles[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                   "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

// A task's seed from the job's, the round's and its own (SplitMix64).
uint64_t Mix(uint64_t seed, uint64_t round, uint64_t task) {
  uint64_t z = seed ^ (round * 0x9E3779B97F4A7C15ULL) ^ (task * 0xBF58476D1CE4E5B9ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::string Str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

ml::Arch ArchOf(const json& a) {
  ml::Arch arch;
  arch.model = a.value("model", "cnn");
  arch.width = a.value("width", 32);
  arch.layers = a.value("layers", 2);
  arch.dropout = a.value("dropout", 0.2);
  return arch;
}

json FileEntry(const std::string& path, const std::string& hash, size_t size) {
  return {{"path", path}, {"sha256", hash}, {"size", size}};
}

// The files of the task's dataset: its blobs, or the agent's own directory.
Result<ml::DatasetFiles> DataOf(const json& p, const RunContext& ctx) {
  std::string paths[4];
  if (p.contains("dataset")) {
    for (int i = 0; i < 4; ++i) {
      std::string h = Str(p["dataset"], kDatasetFiles[i]);
      if (!ctx.blobs->Has(h)) return FailedPrecondition(std::string("dataset.") + kDatasetFiles[i] + ": not fetched");
      paths[i] = ctx.blobs->PathOf(h);
    }
  } else {
    std::string name = Str(p, "local_dataset");
    if (!ctx.datasets || !ctx.datasets->count(name)) {
      return FailedPrecondition("local dataset '" + name + "': this agent has none of that name");
    }
    const std::string& dir = ctx.datasets->at(name);
    for (int i = 0; i < 4; ++i) {
      std::string base = dir + "/" + kLocalFiles[i];
      std::error_code ec;
      if (std::filesystem::is_regular_file(base + ".gz", ec)) {
        paths[i] = base + ".gz";
      } else if (std::filesystem::is_regular_file(base, ec)) {
        paths[i] = base;
      } else {
        return FailedPrecondition("local dataset '" + name + "': no " + kLocalFiles[i] +
                                  "[.gz] in its directory");
      }
    }
  }
  return ml::DatasetFiles{paths[0], paths[1], paths[2], paths[3]};
}

// The round's model, rebuilt from the one before and the update when this
// agent has those rather than the model itself (BlobsToFetch).
Result<Weights> ModelOf(const json& p, const BlobDir& blobs) {
  std::string model = Str(p, "model"), base = Str(p, "base"), update = Str(p, "update");
  constexpr uint64_t kMax = uint64_t{16} << 30;
  if (!blobs.Has(model)) {
    if (base.empty() || !blobs.Has(base) || !blobs.Has(update)) {
      return FailedPrecondition("model " + model + ": not fetched");
    }
    auto prev_bytes = blobs.Load(base, kMax);
    auto update_bytes = blobs.Load(update, kMax);
    if (!prev_bytes.ok()) return prev_bytes.status();
    if (!update_bytes.ok()) return update_bytes.status();
    auto prev = ReadWeights(*prev_bytes);
    auto upd = ReadWeights(*update_bytes);
    if (!prev.ok()) return prev.status();
    if (!upd.ok()) return Status(upd.status().code(), "update: " + upd.status().message());
    CLAW_RETURN_IF_ERROR(SameShapes(*prev, *upd));
    Weights next = Rebuild(*prev, *upd);
    auto hash = blobs.Put(ModelBytes(next));
    if (!hash.ok()) return hash.status();
    if (*hash != model) {
      return Internal("the model rebuilt from " + base + " and update " + update + " is " + *hash +
                      ", not " + model);
    }
    return next;
  }
  auto bytes = blobs.Load(model, kMax);
  if (!bytes.ok()) return bytes.status();
  return ReadWeights(*bytes);
}

bool IsScript(const json& p) { return p.contains("arch") && p["arch"].is_object() && p["arch"].contains("script"); }

// Rows of `block` tokens, or 0: arrays.
int64_t BlockOf(const json& p) { return p["arch"].value("block", int64_t{0}); }

// The files a local dataset holds for a training of a user's module.
std::vector<std::string> LocalFiles(const json& p) {
  if (BlockOf(p) > 0) return {"train_tokens", "test_tokens"};
  return {"train_inputs", "train_targets", "test_inputs", "test_targets"};
}

// The sandbox's limits for a task of a user's module: its memory, the
// round's deadline, the agent's caps.
SandboxLimits ScriptLimits(const json& p, const RunContext& ctx) {
  return MlLimits(p.value("deadline_s", uint64_t{3600}), p.value("threads", uint64_t{1}),
                  p["arch"].value("memory_mb", uint64_t{4096}), ctx);
}

// The first model of a training of a user's module: its own trainable
// parameters, read in the sandbox.
Result<Weights> ScriptInit(const json& p, const RunContext& ctx) {
  MlSandboxRun run;
  run.inputs["model.pt"] = Str(p["arch"], "script");
  run.request = {{"op", "init"}, {"model", "model.pt"}};
  run.outputs = {"out/model.safetensors"};
  run.limits = ScriptLimits(p, ctx);
  auto r = RunMlSandboxed(run, ctx);
  if (!r.ok()) return r.status();
  auto f = r->files.find("out/model.safetensors");
  if (f == r->files.end()) return InvalidArgument("the ML runner wrote no parameters");
  auto bytes = ctx.blobs->Load(f->second["sha256"].get<std::string>(), uint64_t{16} << 30);
  if (!bytes.ok()) return bytes.status();
  return ReadWeights(*bytes);
}

// A round's task on a user's module, in the sandbox: evaluate the round's
// model on the task's test rows, train `steps` from it; the trained
// parameters come back (the delta is taken here).
Result<ml::RoundOutcome> ScriptRoundTask(const json& p, const RunContext& ctx, const std::string& model_hash,
                                         size_t eval_begin, size_t eval_end, int steps) {
  MlSandboxRun run;
  run.inputs["model.pt"] = Str(p["arch"], "script");
  run.inputs["start.safetensors"] = model_hash;
  json data = json::object();
  if (p.contains("data")) {
    for (const auto& [key, hash] : p["data"].items()) {
      if (!hash.is_string()) return InvalidArgument("round task: data." + key.substr(0, 64) + " is not a blob");
      run.inputs["data/" + ModelDataFile(key)] = hash.get<std::string>();
      data[key] = "data/" + ModelDataFile(key);
    }
  } else {  // the agent's own directory, bound read-only
    std::string name = Str(p, "local_dataset");
    if (!ctx.datasets || !ctx.datasets->count(name)) {
      return FailedPrecondition("local dataset '" + name + "': this agent has none of that name");
    }
    run.limits.read_only.emplace_back(ctx.datasets->at(name), "/dataset");
    for (const std::string& key : LocalFiles(p)) data[key] = "/dataset/" + ModelDataFile(key);
  }
  const json& inner = p["inner"];
  run.request = {{"op", "round"},        {"model", "model.pt"},
                 {"start", "start.safetensors"}, {"data", data}, {"block", BlockOf(p)},
                 {"shard", p.value("shard", 0)}, {"shards", p.value("shards", 1)},
                 {"split", p.value("split", "iid")}, {"data_seed", p.value("data_seed", uint64_t{1})},
                 {"train_limit", p.value("train_limit", 0)}, {"steps", steps},
                 {"batch", inner.value("batch", 64)}, {"optimizer", inner.value("optimizer", "adamw")},
                 {"lr", inner.value("lr", 1e-3)}, {"momentum", inner.value("momentum", 0.9)},
                 {"weight_decay", inner.value("weight_decay", 0.0)}, {"seed", p.value("seed", uint64_t{1})},
                 {"threads", p.value("threads", 1)}, {"eval_begin", eval_begin}, {"eval_end", eval_end}};
  run.outputs = {"out/trained.safetensors"};
  auto binds = std::move(run.limits.read_only);
  run.limits = ScriptLimits(p, ctx);
  run.limits.read_only = std::move(binds);
  auto r = RunMlSandboxed(run, ctx);
  if (!r.ok()) return r.status();
  const json& res = r->result;
  ml::RoundOutcome out;
  out.samples = res.value("samples", 0.0);
  out.train_loss = res.value("train_loss", 0.0);
  out.seconds = res.value("seconds", 0.0);
  out.eval_loss_sum = res.value("eval_loss_sum", 0.0);
  out.eval_correct = res.value("eval_correct", int64_t{0});
  out.eval_count = res.value("eval_count", int64_t{0});
  if (steps > 0) {
    auto f = r->files.find("out/trained.safetensors");
    if (f == r->files.end()) return InvalidArgument("the ML runner wrote no trained parameters");
    auto bytes = ctx.blobs->Load(f->second["sha256"].get<std::string>(), uint64_t{16} << 30);
    if (!bytes.ok()) return bytes.status();
    auto w = ReadWeights(*bytes);
    if (!w.ok()) return w.status();
    out.weights = std::move(*w);
  }
  return out;
}

// A liar on purpose (RunContext::misbehave): the delta sign-flipped
// ("flip") or scaled ("scale=K").
void Misbehave(std::string_view how, Weights* delta) {
  float k = -1.0f;
  if (how.starts_with("slow=")) return;  // slow, not wrong (RunTrainOrEval)
  if (how.starts_with("scale=")) k = std::strtof(std::string(how.substr(6)).c_str(), nullptr);
  for (auto& t : *delta) {
    for (float& v : t.values) v *= k;
  }
}

// The rows of a script training's test data (from the .npy or token
// file's header).
Result<size_t> TestRows(const json& p, const RunContext& ctx) {
  const int64_t block = BlockOf(p);
  const std::string key = block > 0 ? "test_tokens" : "test_inputs";
  std::string path;
  if (p.contains("data")) {
    path = ctx.blobs->PathOf(Str(p["data"], key.c_str()));
  } else {
    std::string name = Str(p, "local_dataset");
    if (!ctx.datasets || !ctx.datasets->count(name)) {
      return FailedPrecondition("local dataset '" + name + "': this agent has none of that name");
    }
    path = ctx.datasets->at(name) + "/" + ModelDataFile(key);
  }
  if (block > 0) {
    auto t = tensors::ReadTokenHeader(path);
    if (!t.ok()) return InvalidArgument("test_tokens: " + t.status().message());
    return static_cast<size_t>(t->Windows(static_cast<uint64_t>(block)));
  }
  auto h = tensors::ReadNpyHeader(path);
  if (!h.ok()) return InvalidArgument("test_inputs: " + h.status().message());
  if (h->shape.empty()) return InvalidArgument("test_inputs: a scalar, not rows of data");
  return static_cast<size_t>(h->shape[0]);
}

Result<std::string> RunTrainOrEval(const json& p, const RunContext& ctx, const ml::MlApi& ml) {
  const auto began = std::chrono::steady_clock::now();
  std::string kind = Str(p, "kind");
  auto start = ModelOf(p, *ctx.blobs);
  if (!start.ok()) return start.status();
  const bool script = IsScript(p);
  const json& inner = p["inner"];
  const int steps = kind == "train" ? inner.value("steps", 0) : 0;
  // The task's slice of the test set, evaluated on the round's model.
  size_t eval_begin = 0, eval_end = 0;
  ml::RoundConfig c;
  if (!script) {
    auto data = DataOf(p, ctx);
    if (!data.ok()) return data.status();
    c.data = *data;
  }
  if (p.value("eval", false)) {
    auto n = script ? TestRows(p, ctx) : ml.count_images(c.data.test_images);
    if (!n.ok()) return n.status();
    size_t total = *n, limit = p.value("test_limit", size_t{0});
    if (limit > 0) total = std::min(total, limit);
    size_t task = p.value("task", size_t{0}), tasks = std::max<size_t>(1, p.value("tasks", size_t{1}));
    eval_begin = task * total / tasks;
    eval_end = (task + 1) * total / tasks;
  }
  Result<ml::RoundOutcome> r = InvalidArgument("");
  if (script) {
    r = ScriptRoundTask(p, ctx, Str(p, "model"), eval_begin, eval_end, steps);
  } else {
    c.arch = ArchOf(p["arch"]);
    c.start = *start;
    c.steps = steps;
    c.batch = inner.value("batch", 64);
    c.optimizer = inner.value("optimizer", "adamw");
    c.lr = inner.value("lr", 1e-3);
    c.momentum = inner.value("momentum", 0.9);
    c.weight_decay = inner.value("weight_decay", 0.0);
    c.seed = p.value("seed", uint64_t{1});
    c.threads = p.value("threads", 1);
    c.shard.shard = p.value("shard", size_t{0});
    c.shard.shards = p.value("shards", size_t{1});
    c.shard.split = p.value("split", "iid");
    c.shard.data_seed = p.value("data_seed", uint64_t{1});
    c.shard.limit = p.value("train_limit", size_t{0});
    c.eval_begin = eval_begin;
    c.eval_end = eval_end;
    r = ml.train_round(c);
  }
  if (!r.ok()) return r.status();
  json out = {{"kind", kind},
              {"round", p.value("round", 0)},
              {"task", p.value("task", 0)},
              {"eval", {{"loss_sum", r->eval_loss_sum}, {"correct", r->eval_correct},
                        {"count", r->eval_count}}}};
  json files = json::array();
  if (kind == "train") {
    if (!std::isfinite(r->train_loss)) return InvalidArgument("training diverged (loss not finite)");
    AddScaled(&r->weights, *start, -1.0f);  // the delta
    if (!ctx.misbehave.empty()) Misbehave(ctx.misbehave, &r->weights);
    Codec codec = Codec::kI8;
    ParseCodec(Str(p, "codec"), &codec);
    // With secure aggregation the delta stays on the device (the agent
    // masks it, agent/secagg_device.h): kept exact until it is quantized.
    const bool secure = p.contains("secagg") && p["secagg"].is_object();
    if (secure) codec = Codec::kF32;
    std::string bytes = tensors::WriteSafetensors(Encode(r->weights, codec));
    auto hash = ctx.blobs->Put(bytes);
    if (!hash.ok()) return hash.status();
    out["delta"] = *hash;
    if (secure) out["secagg"] = p["secagg"];
    out["samples"] = r->samples;
    out["train_loss"] = r->train_loss;
    out["seconds"] = r->seconds;
    if (ctx.misbehave.starts_with("slow=")) {  // a device K times slower
      double k = std::strtod(ctx.misbehave.substr(5).c_str(), nullptr);
      double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      if (k > 1 && k < 100) std::this_thread::sleep_for(std::chrono::duration<double>((k - 1) * spent));
    }
    // The whole task on the device: model, data, evaluation, training, encoding.
    out["task_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    files.push_back(FileEntry("delta.safetensors", *hash, bytes.size()));
  } else if (p.value("task", 0) == 0 && !script) {  // eval: one checkpoint of the final model
    auto ckpt = ml.checkpoint_of(c.arch, *start);
    if (!ckpt.ok()) return ckpt.status();
    auto hash = ctx.blobs->Put(*ckpt);
    if (!hash.ok()) return hash.status();
    files.push_back(FileEntry("model.pt", *hash, ckpt->size()));
  }
  out["files"] = files;
  return out.dump();
}

}  // namespace

Result<std::vector<TaskSpec>> RoundApp::Plan(const JobSpec& spec) const {
  const json& p = spec.params;
  auto training = ParseTrainingSpec(p.value("training", json()));
  if (!training.ok()) return training.status();
  const TrainingSpec& t = *training;
  std::string kind = Str(p, "kind");
  uint32_t round = p.value("round", 0u);
  uint64_t seed = p.value("seed", uint64_t{1});
  if (kind == "init") {
    json task = {{"kind", "init"}, {"arch", t.arch}, {"seed", seed}, {"deadline_s", t.deadline_s}};
    return std::vector<TaskSpec>{{task.dump(), 1e9}};
  }
  if (kind != "train" && kind != "eval") return InvalidArgument("params.kind: init, train or eval");
  if (!IsBlobHash(Str(p, "model"))) return InvalidArgument("params.model: must be a blob's SHA-256");
  json common = {{"kind", kind},          {"round", round},
                 {"arch", t.arch},        {"model", p["model"]},
                 {"split", t.split},      {"shards", t.shards},
                 {"train_limit", t.train_limit}, {"test_limit", t.test_limit},
                 {"inner", t.ToJson()["inner"]}, {"codec", CodecName(t.codec)},
                 {"threads", t.threads},  {"data_seed", Mix(seed, 0, 0)},
                 {"deadline_s", t.deadline_s},
                 {"eval", kind == "eval" || p.value("eval", false)}};
  const bool script = t.arch.contains("script");
  if (t.local_dataset.empty()) {
    common[script ? "data" : "dataset"] = t.dataset;
  } else {
    common["local_dataset"] = t.local_dataset;
  }
  if (IsBlobHash(Str(p, "base")) && IsBlobHash(Str(p, "update"))) {
    common["base"] = p["base"];
    common["update"] = p["update"];
  }
  uint32_t tasks = kind == "train" ? t.TasksPerRound() : t.workers;
  common["tasks"] = tasks;
  if (kind == "train" && t.secagg.on) {
    // wait_s: how long the device keeps its delta and keys without hearing
    // of the round (the round's deadline, its protocol's three steps, a
    // minute more); then it forgets them.
    common["secagg"] = {{"range", t.secagg.range},
                        {"clip", t.privacy.on ? t.privacy.clip : 0.0},
                        {"wait_s", t.deadline_s + 3 * t.secagg.step_s + 60}};
  }
  double per_sample = script || t.arch.value("model", "cnn") == "cnn" ? 3e7 : 2e6;
  double cost = kind == "train" ? per_sample * t.inner.steps * t.inner.batch : 1e10;
  std::vector<TaskSpec> out;
  out.reserve(tasks);
  // With privacy, a round's shards are a uniform draw (the accountant's
  // sampling, rounds/privacy.h); otherwise they take turns.
  const std::vector<uint64_t> drawn = t.privacy.on && kind == "train" && t.local_dataset.empty()
                                          ? DrawShards(seed, round, tasks, t.shards)
                                          : std::vector<uint64_t>{};
  for (uint32_t i = 0; i < tasks; ++i) {
    json task = common;
    task["task"] = i;
    task["shard"] = drawn.empty() ? (uint64_t{round} * tasks + i) % t.shards : drawn[i];
    task["seed"] = Mix(seed, round, i + 1);
    out.push_back({task.dump(), cost});
  }
  return out;
}

Result<std::string> RoundApp::Run(std::string_view task_params, const RunContext& ctx) const {
  json p = json::parse(task_params, nullptr, false);
  if (!p.is_object()) return InvalidArgument("fedround task: params are not a JSON object");
  if (!ctx.blobs) return FailedPrecondition("fedround task: this worker has no blob cache");
  auto lib = ml::LoadMl();
  if (!lib.ok()) return lib.status();
  if (Str(p, "kind") == "init") {
    auto w = IsScript(p) ? ScriptInit(p, ctx)
                         : (*lib)->init_model(ArchOf(p.value("arch", json::object())), p.value("seed", uint64_t{1}));
    if (!w.ok()) return w.status();
    std::string bytes = ModelBytes(*w);
    auto hash = ctx.blobs->Put(bytes);
    if (!hash.ok()) return hash.status();
    json out = {{"kind", "init"},
                {"model", *hash},
                {"parameters", ParameterCount(*w)},
                {"files", json::array({FileEntry("model.safetensors", *hash, bytes.size())})}};
    return out.dump();
  }
  return RunTrainOrEval(p, ctx, **lib);
}

namespace {

// A number field of an agent's output, checked: finite, within [lo, hi].
Result<double> NumberIn(const json& o, const char* key, double lo, double hi) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number()) return InvalidArgument(std::string(key) + ": not a number");
  double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    return InvalidArgument(std::string(key) + ": " + it->dump().substr(0, 40) + " is out of range");
  }
  return v;
}

// The output's evaluation {"loss_sum", "correct", "count"}, checked; null
// when it has none.
Result<json> EvalIn(const json& o) {
  auto it = o.find("eval");
  if (it == o.end() || it->is_null()) return json(nullptr);
  if (!it->is_object()) return InvalidArgument("eval: not an object");
  auto count = NumberIn(*it, "count", 0, 1e9);
  auto correct = NumberIn(*it, "correct", 0, 1e9);
  auto loss = NumberIn(*it, "loss_sum", 0, 1e18);
  for (const auto* r : {&count, &correct, &loss}) {
    if (!r->ok()) return Status(r->status().code(), "eval." + r->status().message());
  }
  if (*correct > *count || std::floor(*count) != *count || std::floor(*correct) != *correct) {
    return InvalidArgument("eval: correct and count must be whole, correct at most count");
  }
  return json{{"loss_sum", *loss},
              {"correct", static_cast<int64_t>(*correct)},
              {"count", static_cast<int64_t>(*count)}};
}

// A delta's fingerprint for spot checks: its norm and its projections on
// kProjections fixed pseudo-random ±1 vectors (each with the norm's spread).
// Two runs of the same task agree on them within kSpotTolerance of the norm
// even where floating-point order differs; a delta that is not the task's
// (another shard, a scaled or made-up one) misses by about its distance.
constexpr int kProjections = 8;
constexpr double kSpotTolerance = 0.02;

json Fingerprint(const Weights& delta) {
  std::array<double, kProjections> proj{};
  double sq = 0;
  uint64_t at = 0;
  for (const auto& t : delta) {
    for (float v : t.values) {
      // splitmix64 of the element's index: one sign bit per projection.
      uint64_t z = (at++ + 0x9e3779b97f4a7c15ULL) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      z ^= z >> 31;
      for (int k = 0; k < kProjections; ++k) proj[k] += (z >> k) & 1 ? v : -v;
      sq += static_cast<double>(v) * v;
    }
  }
  json out = json::array({std::sqrt(sq)});
  for (double x : proj) out.push_back(x);
  return out;
}

// Where two checked outputs of one task differ beyond what honest runs
// would; empty when they agree.
std::string Differs(const json& a, const json& b) {
  if (Str(a, "kind") != Str(b, "kind")) return "kind";
  if (Str(a, "kind") == "init") return a.value("model", "") == b.value("model", "") ? "" : "model";
  if (a.value("task", -1) != b.value("task", -1)) return "task";
  if (a.contains("eval") != b.contains("eval")) return "eval";
  if (a.contains("eval")) {
    const json &ea = a["eval"], &eb = b["eval"];
    double count = ea.value("count", 0.0);
    if (count != eb.value("count", 0.0)) return "eval.count";
    if (std::abs(ea.value("correct", 0.0) - eb.value("correct", 0.0)) > std::max(1.0, 0.01 * count)) {
      return "eval.correct";
    }
    double la = ea.value("loss_sum", 0.0), lb = eb.value("loss_sum", 0.0);
    if (std::abs(la - lb) > kSpotTolerance * std::max({std::abs(la), std::abs(lb), 1e-9})) {
      return "eval.loss_sum";
    }
  }
  if (Str(a, "kind") != "train") return "";
  if (a.value("round", -1) != b.value("round", -1)) return "round";
  if (a.value("samples", 0.0) != b.value("samples", 0.0)) return "samples";
  const json fa = a.value("fingerprint", json::array()), fb = b.value("fingerprint", json::array());
  if (fa.size() != kProjections + 1 || fb.size() != kProjections + 1) return "delta";
  double scale = std::max(fa[0].get<double>(), fb[0].get<double>()) + 1e-12;
  for (size_t k = 0; k < fa.size(); ++k) {
    if (std::abs(fa[k].get<double>() - fb[k].get<double>()) > kSpotTolerance * scale) return "delta";
  }
  return "";
}

}  // namespace

// Outputs come from agents: every field is checked, and what is kept is
// rewritten from the checked values alone (Merge and the driver read only
// that), with the sending agent added by the coordinator.
Status RoundApp::CheckOutput(std::string_view task_params, std::string* output,
                             const std::string& agent, const BlobDir& blobs) const {
  json p = json::parse(task_params, nullptr, false);
  json o = json::parse(*output, nullptr, false);
  if (!p.is_object() || !o.is_object()) return InvalidArgument("the output is not a JSON object");
  const std::string kind = Str(p, "kind");
  if (Str(o, "kind") != kind) return InvalidArgument("the output is not of a " + kind + " task");
  json checked = {{"kind", kind}, {"agent", agent}};
  json files = json::array();
  constexpr uint64_t kMaxModel = uint64_t{16} << 30;
  auto file = [&](const std::string& path, const std::string& hash) -> Status {
    auto size = blobs.Size(hash);
    if (!size.ok()) return size.status();
    files.push_back(FileEntry(path, hash, *size));
    return Status::Ok();
  };
  if (kind == "init") {
    std::string model = Str(o, "model");
    if (!IsBlobHash(model)) return InvalidArgument("model: not a blob's SHA-256");
    auto bytes = blobs.Load(model, kMaxModel);
    if (!bytes.ok()) return bytes.status();
    auto w = ReadWeights(*bytes);
    if (!w.ok()) return Status(w.status().code(), "model: " + w.status().message());
    if (!std::isfinite(Norm(*w))) return InvalidArgument("model: a value is not finite");
    checked["model"] = model;
    checked["parameters"] = ParameterCount(*w);
    CLAW_RETURN_IF_ERROR(file("model.safetensors", model));
  } else {
    auto task = NumberIn(o, "task", 0, 1e9);
    if (!task.ok() || *task != p.value("task", -1.0)) {
      return InvalidArgument("task: the output is for another task");
    }
    checked["task"] = static_cast<int64_t>(*task);
    // An evaluation counts only where the task was asked for one, and at
    // most its slice of the test set (a count beyond it would outweigh the
    // other slices in the round's accuracy).
    if (p.value("eval", false)) {
      auto e = EvalIn(o);
      if (!e.ok()) return e.status();
      double tasks = std::max(1.0, p.value("tasks", 1.0));
      double limit = p.value("test_limit", 0.0) > 0 ? p.value("test_limit", 0.0) : 1e7;
      if (!e->is_null() && (*e)["count"].get<double>() > std::ceil(limit / tasks)) {
        return InvalidArgument("eval.count: more than the task's slice of the test set");
      }
      if (!e->is_null()) checked["eval"] = *e;
    }
  }
  if (kind == "train") {
    auto round = NumberIn(o, "round", 0, 1e9);
    if (!round.ok() || *round != p.value("round", -1.0)) {
      return InvalidArgument("round: the output is for another round");
    }
    checked["round"] = static_cast<int64_t>(*round);
    auto model_bytes = blobs.Load(Str(p, "model"), kMaxModel);
    if (!model_bytes.ok()) return model_bytes.status();
    auto model = ReadWeights(*model_bytes);
    if (!model.ok()) return model.status();
    if (p.contains("secagg")) {
      // The delta stayed on the device: its keys for the round's sum.
      json keys = o.value("secagg", json());
      if (!keys.is_object()) return InvalidArgument("secagg: the task asked for secure aggregation; no keys came");
      json k = json::object();
      for (auto [field, bytes] : {std::pair{"handle", 16}, {"c_pk", 32}, {"s_pk", 32}, {"commit", 32}}) {
        auto raw = FromHex(Str(keys, field));
        if (!raw.ok() || raw->size() != static_cast<size_t>(bytes)) {
          return InvalidArgument(std::string("secagg.") + field + ": not " + std::to_string(bytes) + " bytes in hex");
        }
        k[field] = Str(keys, field);
      }
      if (o.contains("delta")) return InvalidArgument("delta: not sent with secure aggregation");
      checked["secagg"] = std::move(k);
    }
    const json inner = p.value("inner", json::object());
    double most = inner.value("steps", 0.0) * inner.value("batch", 0.0);
    auto samples = NumberIn(o, "samples", 0, most);
    if (!samples.ok() || *samples <= 0) {
      return InvalidArgument("samples: not in (0, " + std::to_string(most) +
                             "], what the task may train on");
    }
    auto loss = NumberIn(o, "train_loss", 0, 1e18);
    auto seconds = NumberIn(o, "seconds", 0, 1e9);
    checked["samples"] = *samples;
    checked["train_loss"] = loss.ok() ? *loss : 0.0;
    checked["seconds"] = seconds.ok() ? *seconds : 0.0;
    auto task_seconds = NumberIn(o, "task_seconds", 0, 1e9);
    checked["task_seconds"] = task_seconds.ok() ? *task_seconds : 0.0;
    if (!p.contains("secagg")) {
      // A delta is at most the model in fp32 with room for its header.
      std::string hash = Str(o, "delta");
      if (!IsBlobHash(hash)) return InvalidArgument("delta: not a blob's SHA-256");
      auto delta_bytes = blobs.Load(hash, model_bytes->size() * 2 + (1 << 20));
      if (!delta_bytes.ok()) return Status(delta_bytes.status().code(), "delta: " + delta_bytes.status().message());
      auto delta = ReadWeights(*delta_bytes);
      if (!delta.ok()) return Status(delta.status().code(), "delta: " + delta.status().message());
      Status shapes = SameShapes(*model, *delta);
      if (!shapes.ok()) return Status(shapes.code(), "delta: " + shapes.message());
      if (!std::isfinite(Norm(*delta))) return InvalidArgument("delta: a value is not finite");
      checked["delta"] = hash;
      checked["fingerprint"] = Fingerprint(*delta);
      CLAW_RETURN_IF_ERROR(file("delta.safetensors", hash));
    }
  }
  if (kind == "eval" && o.contains("files") && o["files"].is_array()) {
    for (const json& f : o["files"]) {
      if (!f.is_object() || Str(f, "path") != "model.pt" || !IsBlobHash(Str(f, "sha256")) ||
          p.value("task", -1) != 0) {
        return InvalidArgument("files: the first eval task writes model.pt, and nothing else");
      }
      CLAW_RETURN_IF_ERROR(file("model.pt", Str(f, "sha256")));
    }
  }
  checked["files"] = files;
  *output = checked.dump();
  return Status::Ok();
}

Result<json> RoundApp::Merge(const JobSpec& spec, const std::vector<std::string_view>& outputs) const {
  // Outputs were rewritten from checked values (CheckOutput); a type error
  // here would mean a stored output that was not, and fails the round.
  try {
    return MergeChecked(spec, outputs);
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("a fedround output is malformed: ") + e.what());
  }
}

Result<json> RoundApp::MergeChecked(const JobSpec& spec,
                                    const std::vector<std::string_view>& outputs) const {
  json reports = json::array();
  double loss_sum = 0;
  int64_t correct = 0, count = 0;
  json out = {{"kind", Str(spec.params, "kind")}, {"round", spec.params.value("round", 0)}};
  for (std::string_view text : outputs) {
    if (text.empty()) continue;  // cancelled when the round closed, or failed
    json o = json::parse(text, nullptr, false);
    if (!o.is_object()) return InvalidArgument("a fedround output is not JSON");
    if (o.contains("eval") && o["eval"].is_object()) {
      loss_sum += o["eval"].value("loss_sum", 0.0);
      correct += o["eval"].value("correct", int64_t{0});
      count += o["eval"].value("count", int64_t{0});
    }
    if (o.contains("model")) out["model"] = o["model"];
    for (const auto& f : o.value("files", json::array())) {
      if (f.value("path", "") == "model.pt") out["checkpoint"] = f;
    }
    json r = {{"task", o.value("task", 0)}, {"agent", o.value("agent", "")}};
    for (const char* k : {"delta", "samples", "train_loss", "seconds", "task_seconds", "secagg"}) {
      if (o.contains(k)) r[k] = o[k];
    }
    reports.push_back(std::move(r));
  }
  out["reports"] = std::move(reports);
  if (count > 0) out["eval"] = {{"loss_sum", loss_sum}, {"correct", correct}, {"count", count}};
  return out;
}

// Spot checks (spec `spot_check`): two agents' outputs of one task, both
// rewritten by CheckOutput, agree when everything but who sent them and the
// deltas' exact bytes agrees, and the deltas' fingerprints agree within
// kSpotTolerance.
bool RoundApp::Equivalent(std::string_view, std::string_view a, std::string_view b) const {
  return Difference({}, a, b).empty();
}

std::string RoundApp::Difference(std::string_view, std::string_view a, std::string_view b) const {
  json ja = json::parse(a, nullptr, false), jb = json::parse(b, nullptr, false);
  if (!ja.is_object() || !jb.is_object()) return "an output that is not JSON";
  try {
    return Differs(ja, jb);
  } catch (const json::exception&) {
    return "a malformed output";
  }
}

Status RoundApp::Runnable() const { return ml::FindMl().status(); }

std::vector<std::string> RoundApp::Needs(const JobSpec& spec) const {
  std::vector<std::string> needs{"fedround"};
  const json& t = spec.params.value("training", json::object());
  // A user's module runs only in the sandbox: agents without one get none.
  if (t.is_object() && t.contains("script")) needs.push_back("exec");
  if (t.is_object() && t.contains("local_dataset") && t["local_dataset"].is_string()) {
    needs.push_back("dataset:" + t["local_dataset"].get<std::string>());
  }
  // Only agents that mask their deltas: one without secure aggregation
  // would upload its delta in the clear.
  if (t.is_object() && t.contains("secure_aggregation")) needs.push_back(std::string(kSecAggCapability));
  return needs;
}

namespace {

// A task's data blobs (IDX files, or a script's arrays) and its module.
void AddDataBlobs(const json& p, std::vector<std::string>* out) {
  if (p.contains("dataset") && p["dataset"].is_object()) {
    for (const char* name : kDatasetFiles) {
      if (IsBlobHash(Str(p["dataset"], name))) out->push_back(Str(p["dataset"], name));
    }
  }
  if (p.contains("data") && p["data"].is_object()) {
    for (const auto& [name, hash] : p["data"].items()) {
      if (hash.is_string() && IsBlobHash(hash.get_ref<const std::string&>())) out->push_back(hash);
    }
  }
  if (IsScript(p) && IsBlobHash(Str(p["arch"], "script"))) out->push_back(Str(p["arch"], "script"));
}

}  // namespace

std::vector<std::string> RoundApp::SpecInputBlobs(const JobSpec& spec) const {
  std::vector<std::string> out;
  for (const char* k : {"model", "base", "update"}) {
    if (IsBlobHash(Str(spec.params, k))) out.push_back(Str(spec.params, k));
  }
  return out;
}

std::vector<std::string> RoundApp::TaskInputBlobs(std::string_view task_params) const {
  json p = json::parse(task_params, nullptr, false);
  std::vector<std::string> out;
  if (!p.is_object()) return out;
  for (const char* k : {"model", "base", "update"}) {
    if (IsBlobHash(Str(p, k))) out.push_back(Str(p, k));
  }
  AddDataBlobs(p, &out);
  return out;
}

std::vector<std::string> RoundApp::BlobsToFetch(std::string_view task_params,
                                                const BlobDir& cache) const {
  json p = json::parse(task_params, nullptr, false);
  std::vector<std::string> out;
  if (!p.is_object()) return out;
  std::string model = Str(p, "model"), base = Str(p, "base"), update = Str(p, "update");
  if (IsBlobHash(model) && !cache.Has(model)) {
    // The update (small) where the model before it is here; else the model.
    if (IsBlobHash(base) && IsBlobHash(update) && cache.Has(base)) {
      out.push_back(update);
    } else {
      out.push_back(model);
    }
  }
  AddDataBlobs(p, &out);
  return out;
}

std::vector<std::string> RoundApp::OutputBlobs(std::string_view task_output) const {
  json o = json::parse(task_output, nullptr, false);
  std::vector<std::string> out;
  if (!o.is_object() || !o.contains("files") || !o["files"].is_array()) return out;
  for (const auto& f : o["files"]) {
    if (f.is_object() && IsBlobHash(Str(f, "sha256"))) out.push_back(Str(f, "sha256"));
  }
  return out;
}

}  // namespace claw::rounds

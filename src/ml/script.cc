#include "ml/script.h"

#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "ml/shards.h"
#include "tensors/npy.h"
#include "tensors/safetensors.h"
#include "tensors/tokens.h"

namespace claw::ml {
namespace {

constexpr const char* kContract = " (the contract: docs/models.md)";
constexpr const char* kEpochsDone = "claw_epochs_done";  // in an optimizer state archive

// The last line of a TorchScript error (its traceback comes first), short.
std::string LastLine(const std::string& what) {
  std::string text = what;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  size_t nl = text.rfind('\n');
  std::string line = nl == std::string::npos ? text : text.substr(nl + 1);
  return line.size() > 300 ? line.substr(0, 300) + "..." : line;
}

// A data or parameter file, whole; InvalidArgument naming `what` if it
// cannot be opened.
Result<std::string> ReadInput(const std::string& path, const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return InvalidArgument(what + ": cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Result<torch::Tensor> LoadNpy(const std::string& path, const std::string& what) {
  auto read = ReadInput(path, what);
  if (!read.ok()) return read.status();
  std::string& bytes = *read;
  auto h = tensors::ParseNpyHeader(bytes, bytes.size());
  if (!h.ok()) return InvalidArgument(what + ": " + h.status().message());
  if (h->shape.empty()) return InvalidArgument(what + ": a scalar, not rows of data");
  using tensors::DType;
  void* data = bytes.data() + h->data_offset;
  torch::Tensor t;
  switch (h->dtype) {
    case DType::kF64: t = torch::from_blob(data, h->shape, torch::kFloat64).clone(); break;
    case DType::kF32: t = torch::from_blob(data, h->shape, torch::kFloat32).clone(); break;
    case DType::kF16: t = torch::from_blob(data, h->shape, torch::kFloat16).clone(); break;
    case DType::kBF16: t = torch::from_blob(data, h->shape, torch::kBFloat16).clone(); break;
    case DType::kI64: t = torch::from_blob(data, h->shape, torch::kInt64).clone(); break;
    case DType::kI32: t = torch::from_blob(data, h->shape, torch::kInt32).clone(); break;
    case DType::kI16: t = torch::from_blob(data, h->shape, torch::kInt16).clone(); break;
    case DType::kI8: t = torch::from_blob(data, h->shape, torch::kInt8).clone(); break;
    case DType::kU8: t = torch::from_blob(data, h->shape, torch::kUInt8).clone(); break;
    case DType::kBool: t = torch::from_blob(data, h->shape, torch::kBool).clone(); break;
    // torch has no unsigned 16- or 32-bit type: widened, values kept.
    case DType::kU16: t = torch::from_blob(data, h->shape, torch::kInt16).clone().to(torch::kInt32).bitwise_and(int64_t{0xffff}); break;
    case DType::kU32: t = torch::from_blob(data, h->shape, torch::kInt32).clone().to(torch::kInt64).bitwise_and(int64_t{0xffffffff}); break;
  }
  return t;
}

struct Rows {
  torch::Tensor inputs, targets;
};

// A token file as rows: windows of `block` tokens one after another, and
// the same one token later as targets (views of one int64 tensor).
Result<Rows> LoadTokenRows(const std::string& path, int64_t block, const std::string& what) {
  if (block < 1) return InvalidArgument("block: the tokens in a row, at least 1");
  auto read = ReadInput(path, what);
  if (!read.ok()) return read.status();
  const std::string& bytes = *read;
  auto h = tensors::CheckTokenFile(bytes);
  if (!h.ok()) return InvalidArgument(what + ": " + h.status().message());
  const auto rows = static_cast<int64_t>(h->Windows(static_cast<uint64_t>(block)));
  if (rows == 0) {
    return InvalidArgument(what + ": " + std::to_string(h->count) + " tokens make no row of block " +
                           std::to_string(block) + " (and its next token)");
  }
  const auto n = static_cast<int64_t>(h->count);
  void* data = const_cast<char*>(bytes.data()) + tensors::kTokenHeaderBytes;
  torch::Tensor all;
  switch (h->width) {
    case 1: all = torch::from_blob(data, {n}, torch::kUInt8).to(torch::kInt64); break;
    case 2: all = torch::from_blob(data, {n}, torch::kInt16).to(torch::kInt64).bitwise_and(int64_t{0xffff}); break;
    default: all = torch::from_blob(data, {n}, torch::kInt32).to(torch::kInt64).bitwise_and(int64_t{0xffffffff}); break;
  }
  const int64_t used = rows * block;
  return Rows{all.narrow(0, 0, used).view({rows, block}), all.narrow(0, 1, used).view({rows, block})};
}

Result<Rows> LoadRows(const std::string& inputs, const std::string& targets, size_t limit,
                      const std::string& split) {
  auto x = LoadNpy(inputs, split + "_inputs");
  if (!x.ok()) return x.status();
  auto y = LoadNpy(targets, split + "_targets");
  if (!y.ok()) return y.status();
  if (x->size(0) != y->size(0)) {
    return InvalidArgument(split + "_inputs has " + std::to_string(x->size(0)) + " rows, " + split +
                           "_targets " + std::to_string(y->size(0)) + ": they must match row for row");
  }
  if (x->size(0) == 0) return InvalidArgument(split + "_inputs: no rows");
  Rows r{*x, *y};
  if (limit > 0 && static_cast<int64_t>(limit) < r.inputs.size(0)) {
    r.inputs = r.inputs.narrow(0, 0, static_cast<int64_t>(limit));
    r.targets = r.targets.narrow(0, 0, static_cast<int64_t>(limit));
  }
  return r;
}

// The training or test rows of a dataset: arrays or tokens.
Result<Rows> LoadSplit(const ArrayFiles& files, bool train, size_t limit) {
  const std::string& tokens = train ? files.train_tokens : files.test_tokens;
  if (tokens.empty()) {
    return train ? LoadRows(files.train_inputs, files.train_targets, limit, "train")
                 : LoadRows(files.test_inputs, files.test_targets, limit, "test");
  }
  auto r = LoadTokenRows(tokens, files.block, train ? "train_tokens" : "test_tokens");
  if (r.ok() && limit > 0 && static_cast<int64_t>(limit) < r->inputs.size(0)) {
    r->inputs = r->inputs.narrow(0, 0, static_cast<int64_t>(limit));
    r->targets = r->targets.narrow(0, 0, static_cast<int64_t>(limit));
  }
  return r;
}

Result<torch::jit::Module> LoadModule(const std::string& path) {
  try {
    return torch::jit::load(path);
  } catch (const std::exception& e) {
    return InvalidArgument("model: not a TorchScript file torch.jit.load can read (" +
                           LastLine(e.what()) + ")");
  }
}

// The method's inputs (self and two) and one output of the kind asked.
bool HasMethod(torch::jit::Module& m, const char* name, size_t args, c10::TypeKind returns) {
  auto method = m.find_method(name);
  if (!method) return false;
  const c10::FunctionSchema& s = method->function().getSchema();
  return s.arguments().size() == args + 1 && s.returns().size() == 1 &&
         s.returns()[0].type()->kind() == returns;
}

ScriptReport Report(torch::jit::Module& m) {
  ScriptReport r;
  r.training_step = HasMethod(m, "training_step", 2, c10::TypeKind::TensorType);
  r.eval_step = HasMethod(m, "eval_step", 2, c10::TypeKind::TupleType);
  r.forward = HasMethod(m, "forward", 1, c10::TypeKind::TensorType);
  for (const auto& p : m.named_parameters(true)) {
    r.parameters += p.value.numel();
    if (p.value.requires_grad()) {
      r.trainable += p.value.numel();
      r.trainable_names.push_back(p.name);
    }
  }
  return r;
}

Status CheckContract(const ScriptReport& r, bool need_eval) {
  if (!r.training_step) {
    return InvalidArgument(std::string("model: no method training_step(inputs: Tensor, targets: "
                                       "Tensor) -> Tensor returning the loss") + kContract);
  }
  if (need_eval && !r.eval_step) {
    return InvalidArgument(std::string("model: no method eval_step(inputs: Tensor, targets: Tensor) "
                                       "-> Tuple[Tensor, Tensor, Tensor] returning (loss summed, "
                                       "right, counted)") + kContract);
  }
  if (r.trainable == 0) return InvalidArgument("model: no parameter has requires_grad: nothing to train");
  return Status::Ok();
}

// Replaces the module's trainable parameters with those of a safetensors
// file (ScriptTrainOutcome::trainable): every one there, by name and shape,
// and nothing else.
Status LoadTrainable(torch::jit::Module& m, const std::string& path) {
  auto read = ReadInput(path, "trainable");
  if (!read.ok()) return read.status();
  auto file = tensors::ParseSafetensors(*read);
  if (!file.ok()) return InvalidArgument("trainable: " + file.status().message());
  size_t used = 0;
  torch::NoGradGuard no_grad;
  for (const auto& p : m.named_parameters(true)) {
    if (!p.value.requires_grad()) continue;
    const tensors::Tensor* t = file->Find(p.name);
    if (!t) return InvalidArgument("trainable: no tensor for the model's parameter " + p.name);
    if (t->shape != p.value.sizes().vec()) {
      return InvalidArgument("trainable." + p.name + ": its shape is not the model's");
    }
    auto values = tensors::ToFloats(*t);
    if (!values.ok()) return InvalidArgument("trainable." + p.name + ": " + values.status().message());
    p.value.copy_(torch::from_blob(values->data(), p.value.sizes(), torch::kFloat32));
    ++used;
  }
  if (used != file->tensors.size()) {
    return InvalidArgument("trainable: the file has " + std::to_string(file->tensors.size()) +
                           " tensors, the model " + std::to_string(used) +
                           " trainable parameters: another model's?");
  }
  return Status::Ok();
}

// An optimizer over the module's trainable parameters alone.
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(torch::jit::Module& m, const std::string& kind,
                                                       double lr, double momentum, double weight_decay) {
  std::vector<torch::Tensor> params;
  for (const auto& p : m.parameters(true)) {
    if (p.requires_grad()) params.push_back(p);
  }
  if (kind == "adamw") {
    return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(lr).weight_decay(weight_decay));
  }
  if (kind == "adam") {
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(lr).weight_decay(weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(lr).momentum(momentum).weight_decay(weight_decay));
}

// One step of training_step on a batch: the loss, after backward.
Result<double> Step(torch::jit::Method& step, torch::optim::Optimizer& optimizer, const torch::Tensor& x,
                    const torch::Tensor& y) {
  optimizer.zero_grad();
  torch::Tensor loss;
  try {
    c10::IValue v = step({x, y});
    if (!v.isTensor() || v.toTensor().numel() != 1) {
      return InvalidArgument("model: training_step must return the loss as a one-element tensor");
    }
    loss = v.toTensor();
    if (!loss.requires_grad()) {
      return InvalidArgument("model: training_step's loss does not depend on a trainable parameter");
    }
    loss.backward();
  } catch (const std::exception& e) {
    return InvalidArgument("model: training_step failed: " + LastLine(e.what()));
  }
  optimizer.step();
  return loss.item<double>();
}

struct Eval {
  double loss = 0, accuracy = 0;
};

Result<Eval> Evaluate(torch::jit::Module& m, const Rows& test, int batch) {
  torch::NoGradGuard no_grad;
  m.eval();
  auto method = m.get_method("eval_step");
  double loss = 0, right = 0, counted = 0;
  int64_t n = test.inputs.size(0);
  for (int64_t at = 0; at < n; at += batch) {
    int64_t len = std::min<int64_t>(batch, n - at);
    c10::IValue out;
    try {
      out = method({test.inputs.narrow(0, at, len), test.targets.narrow(0, at, len)});
    } catch (const std::exception& e) {
      return InvalidArgument("model: eval_step failed: " + LastLine(e.what()));
    }
    auto t = out.toTuple();
    if (t->elements().size() != 3 || !t->elements()[0].isTensor() || !t->elements()[1].isTensor() ||
        !t->elements()[2].isTensor()) {
      return InvalidArgument("model: eval_step must return three tensors (loss summed, right, counted)");
    }
    loss += t->elements()[0].toTensor().sum().item<double>();
    right += t->elements()[1].toTensor().sum().item<double>();
    counted += t->elements()[2].toTensor().sum().item<double>();
  }
  m.train();
  if (!(counted > 0)) return InvalidArgument("model: eval_step counted no items");
  return Eval{loss / counted, right / counted};
}

std::string TrainableSafetensors(torch::jit::Module& m) {
  tensors::TensorFile file;
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& p : m.named_parameters(true)) {
    if (p.value.requires_grad()) params.emplace_back(p.name, p.value);
  }
  std::sort(params.begin(), params.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [name, value] : params) {
    torch::Tensor t = value.detach().to(torch::kFloat32).contiguous();
    file.tensors.push_back(tensors::FloatTensor(
        name, t.sizes().vec(), std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel())));
  }
  return tensors::WriteSafetensors(file);
}

}  // namespace

Result<ScriptReport> InspectScript(const std::string& model_path) {
  auto m = LoadModule(model_path);
  if (!m.ok()) return m.status();
  ScriptReport r = Report(*m);
  CLAW_RETURN_IF_ERROR(CheckContract(r, false));
  return r;
}

Result<std::string> ScriptTrainable(const std::string& model_path) {
  auto m = LoadModule(model_path);
  if (!m.ok()) return m.status();
  CLAW_RETURN_IF_ERROR(CheckContract(Report(*m), false));
  return TrainableSafetensors(*m);
}

Result<ScriptRoundOutcome> ScriptRound(const ScriptRoundConfig& c) {
  if (c.steps < 0 || c.batch < 1 || c.threads < 1 || c.eval_batch < 1) {
    return InvalidArgument("steps, batch, eval_batch, threads");
  }
  if (c.optimizer != "adamw" && c.optimizer != "sgd") return InvalidArgument("optimizer: adamw or sgd");
  torch::set_num_threads(c.threads);
  auto loaded = LoadModule(c.model);
  if (!loaded.ok()) return loaded.status();
  torch::jit::Module& m = *loaded;
  const bool evaluate = c.eval_end > c.eval_begin;
  CLAW_RETURN_IF_ERROR(CheckContract(Report(m), evaluate));
  CLAW_RETURN_IF_ERROR(LoadTrainable(m, c.start));
  ScriptRoundOutcome out;
  if (evaluate) {
    auto test = LoadSplit(c.data, false, 0);
    if (!test.ok()) return test.status();
    const int64_t n = test->inputs.size(0);
    if (static_cast<int64_t>(c.eval_end) > n) {
      return InvalidArgument("eval: rows [" + std::to_string(c.eval_begin) + ", " + std::to_string(c.eval_end) +
                             ") are outside the " + std::to_string(n) + " test rows");
    }
    const auto begin = static_cast<int64_t>(c.eval_begin), len = static_cast<int64_t>(c.eval_end - c.eval_begin);
    Rows part{test->inputs.narrow(0, begin, len), test->targets.narrow(0, begin, len)};
    auto e = Evaluate(m, part, c.eval_batch);
    if (!e.ok()) return e.status();
    out.eval_count = len;
    out.eval_loss_sum = e->loss * static_cast<double>(len);
    out.eval_correct = std::llround(e->accuracy * static_cast<double>(len));
  }
  if (c.steps == 0) return out;
  auto train = LoadSplit(c.data, true, c.shard.limit);
  if (!train.ok()) return train.status();
  // by_label needs class labels: integer targets, one a row.
  torch::Tensor labels;
  const int64_t* label_ptr = nullptr;
  if (train->targets.dim() == 1 && !torch::isFloatingType(train->targets.scalar_type())) {
    labels = train->targets.to(torch::kInt64).contiguous();
    label_ptr = labels.data_ptr<int64_t>();
  }
  auto shard = ShardRows(train->inputs.size(0), label_ptr, c.shard);
  if (!shard.ok()) return shard.status();
  auto optimizer = MakeOptimizer(m, c.optimizer, c.lr, c.momentum, c.weight_decay);
  auto step = m.get_method("training_step");
  auto start = std::chrono::steady_clock::now();
  torch::manual_seed(c.seed);
  ShardBatches batches(std::move(*shard), c.seed);
  double loss_sum = 0;
  m.train();
  for (int s = 0; s < c.steps; ++s) {
    std::vector<int64_t> idx = batches.Next(static_cast<size_t>(c.batch));
    auto ids = torch::from_blob(idx.data(), {static_cast<int64_t>(idx.size())}, torch::kInt64);
    auto loss = Step(step, *optimizer, train->inputs.index_select(0, ids), train->targets.index_select(0, ids));
    if (!loss.ok()) return loss.status();
    loss_sum += *loss;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.train_loss = loss_sum / c.steps;
  out.samples = static_cast<double>(c.steps) * c.batch;
  if (!std::isfinite(out.train_loss)) return InvalidArgument("training diverged (loss not finite)");
  out.trained = TrainableSafetensors(m);
  return out;
}

Result<ScriptTrainOutcome> TrainScript(const ScriptTrainConfig& c) {
  if (c.batch < 1 || c.epochs < 1 || c.threads < 1 || c.eval_batch < 1) {
    return InvalidArgument("batch, epochs, eval_batch and threads: at least 1");
  }
  if (c.optimizer != "adamw" && c.optimizer != "adam" && c.optimizer != "sgd") {
    return InvalidArgument("optimizer: adamw, adam or sgd");
  }
  torch::set_num_threads(c.threads);
  auto loaded = LoadModule(c.model);
  if (!loaded.ok()) return loaded.status();
  torch::jit::Module& m = *loaded;
  ScriptTrainOutcome out;
  out.report = Report(m);
  bool evaluate = c.data.HasTest();
  CLAW_RETURN_IF_ERROR(CheckContract(out.report, evaluate));
  auto train = LoadSplit(c.data, true, c.train_limit);
  if (!train.ok()) return train.status();
  Rows test;
  if (evaluate) {
    auto t = LoadSplit(c.data, false, c.test_limit);
    if (!t.ok()) return t.status();
    test = std::move(*t);
  }

  if (!c.trainable_from.empty()) CLAW_RETURN_IF_ERROR(LoadTrainable(m, c.trainable_from));
  std::unique_ptr<torch::optim::Optimizer> optimizer =
      MakeOptimizer(m, c.optimizer, c.lr, c.momentum, c.weight_decay);
  if (!c.state_from.empty()) {
    try {
      torch::serialize::InputArchive ar;
      ar.load_from(c.state_from);
      optimizer->load(ar);
      torch::Tensor done;
      ar.read(kEpochsDone, done);
      out.first_epoch = static_cast<int>(done.item<int64_t>()) + 1;
    } catch (const std::exception& e) {
      return InvalidArgument("resume: the optimizer state is unreadable or another optimizer's (" +
                             LastLine(e.what()) + ")");
    }
  }
  auto step = m.get_method("training_step");
  const int64_t n = train->inputs.size(0);
  m.train();
  for (int epoch = out.first_epoch; epoch <= c.epochs; ++epoch) {
    auto start = std::chrono::steady_clock::now();
    torch::manual_seed(c.seed * 1'000'003 + static_cast<uint64_t>(epoch));
    torch::Tensor order = torch::randperm(n, torch::kInt64);
    double loss_sum = 0;
    for (int64_t at = 0; at < n; at += c.batch) {
      int64_t len = std::min<int64_t>(c.batch, n - at);
      auto idx = order.narrow(0, at, len);
      auto loss = Step(step, *optimizer, train->inputs.index_select(0, idx), train->targets.index_select(0, idx));
      if (!loss.ok()) return loss.status();
      loss_sum += *loss * static_cast<double>(len);
    }
    EpochMetrics em;
    em.epoch = epoch;
    em.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    em.loss = loss_sum / static_cast<double>(n);
    em.accuracy = -1;
    em.test_loss = em.test_accuracy = std::nan("");  // none without test data
    if (evaluate && std::isfinite(em.loss)) {
      auto e = Evaluate(m, test, c.eval_batch);
      if (!e.ok()) return e.status();
      em.test_loss = e->loss;
      em.test_accuracy = e->accuracy;
    }
    out.epochs.push_back(em);
    if (!std::isfinite(em.loss)) {
      out.diverged = true;
      return out;
    }
  }
  out.trainable = TrainableSafetensors(m);
  torch::serialize::OutputArchive ar;
  optimizer->save(ar);
  ar.write(kEpochsDone, torch::tensor(static_cast<int64_t>(std::max(c.epochs, out.first_epoch - 1))));
  std::ostringstream bytes;
  ar.save_to(bytes);
  out.state = bytes.str();
  return out;
}

Result<ScriptPredictions> PredictScript(const ScriptPredictConfig& c) {
  if (c.batch < 1 || c.threads < 1) return InvalidArgument("batch and threads: at least 1");
  torch::set_num_threads(c.threads);
  torch::NoGradGuard no_grad;
  auto loaded = LoadModule(c.model);
  if (!loaded.ok()) return loaded.status();
  torch::jit::Module& m = *loaded;
  ScriptReport report = Report(m);
  if (!report.forward) {
    return InvalidArgument(std::string("model: no method forward(inputs: Tensor) -> Tensor to predict "
                                       "with") + kContract);
  }
  if (!c.trainable_from.empty()) CLAW_RETURN_IF_ERROR(LoadTrainable(m, c.trainable_from));
  Rows rows;
  if (!c.targets.empty()) {
    auto r = LoadRows(c.inputs, c.targets, 0, "test");
    if (!r.ok()) return r.status();
    rows = std::move(*r);
  } else {
    auto x = LoadNpy(c.inputs, "inputs");
    if (!x.ok()) return x.status();
    rows.inputs = *x;
  }
  const size_t n = static_cast<size_t>(rows.inputs.size(0));
  ScriptPredictions out;
  out.begin = std::min(c.begin, n);
  out.end = c.end == 0 ? n : std::min(c.end, n);
  if (out.end < out.begin) out.end = out.begin;
  const int64_t begin = static_cast<int64_t>(out.begin), len = static_cast<int64_t>(out.end - out.begin);
  m.eval();
  auto forward = m.get_method("forward");
  std::vector<torch::Tensor> outputs;
  auto start = std::chrono::steady_clock::now();
  for (int64_t at = 0; at < len; at += c.batch) {
    int64_t k = std::min<int64_t>(c.batch, len - at);
    c10::IValue v;
    try {
      v = forward({rows.inputs.narrow(0, begin + at, k)});
    } catch (const std::exception& e) {
      return InvalidArgument("model: forward failed: " + LastLine(e.what()));
    }
    if (!v.isTensor() || v.toTensor().dim() == 0 || v.toTensor().size(0) != k) {
      return InvalidArgument("model: forward must return a tensor with a row for each input row");
    }
    outputs.push_back(v.toTensor().to(torch::kFloat32).contiguous());
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (len > 0) {
    torch::Tensor all = torch::cat(outputs, 0).contiguous();
    if (all.dim() == 2 && all.size(1) > 1) {
      torch::Tensor best = all.argmax(1).contiguous();
      out.classes.assign(best.data_ptr<int64_t>(), best.data_ptr<int64_t>() + best.numel());
    }
    tensors::Tensor t;
    t.dtype = tensors::DType::kF32;
    t.shape = all.sizes().vec();
    t.data.assign(reinterpret_cast<const char*>(all.data_ptr<float>()),
                  static_cast<size_t>(all.numel()) * sizeof(float));
    auto npy = tensors::WriteNpy(t);
    if (!npy.ok()) return npy.status();
    out.outputs_npy = std::move(*npy);
    if (!c.targets.empty() && report.eval_step) {
      Rows part{rows.inputs.narrow(0, begin, len), rows.targets.narrow(0, begin, len)};
      auto e = Evaluate(m, part, c.batch);
      if (!e.ok()) return e.status();
      out.loss = e->loss;
      out.accuracy = e->accuracy;
    }
  }
  return out;
}

}  // namespace claw::ml

#include "ml/trainer.h"

#include "ml/api.h"
#include "ml/shards.h"

#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <sstream>

namespace claw::ml {
namespace {

// Fashion-MNIST's pixel mean and standard deviation (training set, [0, 1]).
constexpr double kMean = 0.2860, kStd = 0.3530;
constexpr int64_t kSide = 28, kClasses = 10;

// ---- data ------------------------------------------------------------------

Result<std::string> ReadGz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  if (!f) return InvalidArgument("cannot open " + path);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  bool bad = n < 0;
  gzclose(f);
  if (bad) return InvalidArgument(path + ": not a readable gzip file");
  return out;
}

uint32_t BigEndian(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint32_t(uint8_t(s[at + 3]));
}

// An IDX file's bytes after its header, checked: images N x 28 x 28
// (magic 2051) or labels N (magic 2049).
Result<std::pair<std::string, size_t>> ReadIdx(const std::string& path, bool images) {
  auto raw = ReadGz(path);
  if (!raw.ok()) return raw.status();
  size_t header = images ? 16 : 8;
  if (raw->size() < header || BigEndian(*raw, 0) != (images ? 2051u : 2049u)) {
    return InvalidArgument(path + ": not an IDX " + (images ? "image" : "label") + " file");
  }
  size_t n = BigEndian(*raw, 4);
  if (images && (BigEndian(*raw, 8) != kSide || BigEndian(*raw, 12) != kSide)) {
    return InvalidArgument(path + ": images are not 28x28");
  }
  size_t per = images ? kSide * kSide : 1;
  if (raw->size() != header + n * per) return InvalidArgument(path + ": truncated");
  return std::make_pair(raw->substr(header), n);
}

struct Split {
  torch::Tensor images;  // N x 1 x 28 x 28, normalized
  torch::Tensor labels;  // N, int64
};

// Decoded files, kept for the life of the worker process: trials of one
// sweep reuse them (decoding 60,000 images takes ~0.3 s).
std::mutex cache_mu;
std::map<std::string, torch::Tensor> cache;

Result<torch::Tensor> Load(const std::string& path, bool images) {
  std::lock_guard lock(cache_mu);
  if (auto it = cache.find(path); it != cache.end()) return it->second;
  auto idx = ReadIdx(path, images);
  if (!idx.ok()) return idx.status();
  auto& [bytes, n] = *idx;
  torch::Tensor t =
      torch::from_blob(bytes.data(), {static_cast<int64_t>(bytes.size())}, torch::kUInt8).clone();
  if (images) {
    t = t.view({static_cast<int64_t>(n), 1, kSide, kSide}).to(torch::kFloat32).div_(255.0);
    t = t.sub_(kMean).div_(kStd);
  } else {
    t = t.to(torch::kInt64);
  }
  cache.emplace(path, t);
  return t;
}

Result<Split> LoadSplit(const std::string& images, const std::string& labels, size_t limit) {
  auto x = Load(images, true);
  if (!x.ok()) return x.status();
  Split s{*x, {}};
  if (!labels.empty()) {
    auto y = Load(labels, false);
    if (!y.ok()) return y.status();
    if (y->size(0) != x->size(0)) return InvalidArgument(labels + ": not as many labels as images");
    s.labels = *y;
  }
  if (limit > 0 && static_cast<int64_t>(limit) < s.images.size(0)) {
    s.images = s.images.narrow(0, 0, static_cast<int64_t>(limit));
    if (s.labels.defined()) s.labels = s.labels.narrow(0, 0, static_cast<int64_t>(limit));
  }
  return s;
}

// ---- models ----------------------------------------------------------------

struct Shape {
  int64_t kind = 0;  // 0 mlp, 1 cnn
  int64_t width = 32, layers = 2;
  double dropout = 0.2;
};

struct NetImpl : torch::nn::Module {
  explicit NetImpl(const Shape& s) : shape(s) {
    if (s.kind == 0) {
      int64_t in = kSide * kSide;
      for (int64_t i = 0; i < s.layers; ++i) {
        hidden.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(in, s.width)));
        in = s.width;
      }
      out = register_module("out", torch::nn::Linear(in, kClasses));
    } else {
      int64_t in = 1, side = kSide;
      for (int64_t i = 0; i < s.layers; ++i) {
        int64_t ch = i == 0 ? s.width : 2 * s.width;
        convs.push_back(register_module(
            "conv" + std::to_string(i),
            torch::nn::Conv2d(torch::nn::Conv2dOptions(in, ch, 3).padding(1))));
        in = ch;
        if (i < 2) side /= 2;  // the first two layers pool
      }
      hidden.push_back(register_module("fc", torch::nn::Linear(in * side * side, 128)));
      out = register_module("out", torch::nn::Linear(128, kClasses));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    namespace F = torch::nn::functional;
    if (shape.kind == 0) {
      x = x.flatten(1);
      for (auto& fc : hidden) {
        x = F::dropout(torch::relu(fc->forward(x)), F::DropoutFuncOptions().p(shape.dropout).training(is_training()));
      }
      return out->forward(x);
    }
    for (size_t i = 0; i < convs.size(); ++i) {
      x = torch::relu(convs[i]->forward(x));
      if (i < 2) x = F::max_pool2d(x, F::MaxPool2dFuncOptions(2));
    }
    x = torch::relu(hidden[0]->forward(x.flatten(1)));
    x = F::dropout(x, F::DropoutFuncOptions().p(shape.dropout).training(is_training()));
    return out->forward(x);
  }
  Shape shape;
  std::vector<torch::nn::Conv2d> convs;
  std::vector<torch::nn::Linear> hidden;
  torch::nn::Linear out{nullptr};
};
TORCH_MODULE(Net);

void SaveShape(torch::serialize::OutputArchive& ar, const Shape& s, int64_t epoch) {
  ar.write("claw.shape", torch::tensor({s.kind, s.width, s.layers, epoch}));
  ar.write("claw.dropout", torch::tensor({s.dropout}, torch::kFloat64));
}

Result<std::pair<Shape, int64_t>> LoadShape(torch::serialize::InputArchive& ar) {
  torch::Tensor v, d;
  if (!ar.try_read("claw.shape", v) || !ar.try_read("claw.dropout", d) || v.numel() != 4) {
    return InvalidArgument("not a claw checkpoint (no model shape in it)");
  }
  auto a = v.accessor<int64_t, 1>();
  return std::make_pair(Shape{a[0], a[1], a[2], d.item<double>()}, a[3]);
}

std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(const TrainConfig& c, Net& net) {
  if (c.optimizer == "adam") {
    return std::make_unique<torch::optim::Adam>(
        net->parameters(), torch::optim::AdamOptions(c.lr).weight_decay(c.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(
      net->parameters(),
      torch::optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
}

// Loss (mean) and accuracy of `net` on a split, in eval mode.
std::pair<double, double> Evaluate(Net& net, const Split& s) {
  torch::NoGradGuard no_grad;
  net->eval();
  double loss = 0;
  int64_t correct = 0, n = s.images.size(0);
  for (int64_t at = 0; at < n; at += 1000) {
    int64_t len = std::min<int64_t>(1000, n - at);
    auto logits = net->forward(s.images.narrow(0, at, len));
    auto y = s.labels.narrow(0, at, len);
    loss += torch::nn::functional::cross_entropy(
                logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
    correct += logits.argmax(1).eq(y).sum().item<int64_t>();
  }
  net->train();
  return {loss / static_cast<double>(n), static_cast<double>(correct) / static_cast<double>(n)};
}

Status CheckConfig(const TrainConfig& c) {
  if (c.model != "cnn" && c.model != "mlp") return InvalidArgument("model: cnn or mlp");
  if (c.optimizer != "sgd" && c.optimizer != "adam") return InvalidArgument("optimizer: sgd or adam");
  if (c.width < 1 || c.width > 4096) return InvalidArgument("width: 1 to 4096");
  if (c.layers < 1 || c.layers > 16) return InvalidArgument("layers: 1 to 16");
  if (c.dropout < 0 || c.dropout >= 1) return InvalidArgument("dropout: from 0 to below 1");
  if (c.batch < 1 || c.epochs < 1 || c.threads < 1) {
    return InvalidArgument("batch, epochs and threads: at least 1");
  }
  return Status::Ok();
}

}  // namespace

Result<TrainOutcome> Train(const TrainConfig& c) {
  CLAW_RETURN_IF_ERROR(CheckConfig(c));
  torch::set_num_threads(c.threads);
  auto train = LoadSplit(c.data.train_images, c.data.train_labels, c.train_limit);
  if (!train.ok()) return train.status();
  auto test = LoadSplit(c.data.test_images, c.data.test_labels, c.test_limit);
  if (!test.ok()) return test.status();

  Shape shape{c.model == "mlp" ? 0 : 1, c.width, c.layers, c.dropout};
  torch::manual_seed(c.seed);  // initial weights
  Net net(shape);
  auto optimizer = MakeOptimizer(c, net);
  TrainOutcome outcome;
  if (!c.resume_from.empty()) {
    try {
      torch::serialize::InputArchive ar;
      ar.load_from(c.resume_from);
      auto saved = LoadShape(ar);
      if (!saved.ok()) return saved.status();
      if (saved->first.kind != shape.kind || saved->first.width != shape.width ||
          saved->first.layers != shape.layers) {
        return InvalidArgument("resume: the checkpoint holds a different model");
      }
      net->load(ar);
      optimizer->load(ar);
      outcome.first_epoch = static_cast<int>(saved->second) + 1;
    } catch (const c10::Error& e) {
      return InvalidArgument(std::string("resume: unreadable checkpoint: ") + e.what_without_backtrace());
    }
  }
  for (const auto& p : net->parameters()) outcome.parameters += p.numel();

  const int64_t n = train->images.size(0);
  net->train();
  for (int epoch = outcome.first_epoch; epoch <= c.epochs; ++epoch) {
    auto start = std::chrono::steady_clock::now();
    // The epoch's shuffle and dropout depend on (seed, epoch) only.
    torch::manual_seed(c.seed * 1'000'003 + static_cast<uint64_t>(epoch));
    torch::Tensor order = torch::randperm(n, torch::kInt64);
    double loss_sum = 0;
    int64_t correct = 0;
    for (int64_t at = 0; at < n; at += c.batch) {
      int64_t len = std::min<int64_t>(c.batch, n - at);
      auto idx = order.narrow(0, at, len);
      auto x = train->images.index_select(0, idx);
      auto y = train->labels.index_select(0, idx);
      optimizer->zero_grad();
      auto logits = net->forward(x);
      auto loss = torch::nn::functional::cross_entropy(logits, y);
      loss.backward();
      optimizer->step();
      loss_sum += loss.item<double>() * static_cast<double>(len);
      correct += logits.argmax(1).eq(y).sum().item<int64_t>();
    }
    EpochMetrics m;
    m.epoch = epoch;
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    m.loss = loss_sum / static_cast<double>(n);
    m.accuracy = static_cast<double>(correct) / static_cast<double>(n);
    std::tie(m.test_loss, m.test_accuracy) = Evaluate(net, *test);
    outcome.epochs.push_back(m);
    if (!std::isfinite(m.loss)) {
      outcome.diverged = true;
      return outcome;
    }
  }
  torch::serialize::OutputArchive ar;
  net->save(ar);
  optimizer->save(ar);
  SaveShape(ar, shape, std::max(c.epochs, outcome.first_epoch - 1));
  std::ostringstream bytes;
  ar.save_to(bytes);
  outcome.checkpoint = bytes.str();
  return outcome;
}

Result<size_t> CountImages(const std::string& images) {
  auto x = Load(images, true);
  if (!x.ok()) return x.status();
  return static_cast<size_t>(x->size(0));
}

Result<Predictions> Predict(const std::string& checkpoint_path, const std::string& images,
                            const std::string& labels, size_t begin, size_t end, int threads) {
  torch::set_num_threads(std::max(1, threads));
  auto data = LoadSplit(images, labels, 0);
  if (!data.ok()) return data.status();
  int64_t n = data->images.size(0);
  if (begin >= end || static_cast<int64_t>(end) > n) {
    return InvalidArgument("shard [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") is outside the " + std::to_string(n) + " images");
  }
  std::unique_ptr<Net> net;
  try {
    torch::serialize::InputArchive ar;
    ar.load_from(checkpoint_path);
    auto saved = LoadShape(ar);
    if (!saved.ok()) return saved.status();
    net = std::make_unique<Net>(saved->first);
    (*net)->load(ar);
  } catch (const c10::Error& e) {
    return InvalidArgument(std::string("model: unreadable checkpoint: ") + e.what_without_backtrace());
  }
  torch::NoGradGuard no_grad;
  (*net)->eval();
  auto start = std::chrono::steady_clock::now();
  Predictions p;
  int64_t correct = 0;
  for (int64_t at = static_cast<int64_t>(begin); at < static_cast<int64_t>(end); at += 1000) {
    int64_t len = std::min<int64_t>(1000, static_cast<int64_t>(end) - at);
    auto pred = (*net)->forward(data->images.narrow(0, at, len)).argmax(1);
    if (data->labels.defined()) {
      correct += pred.eq(data->labels.narrow(0, at, len)).sum().item<int64_t>();
    }
    auto bytes = pred.to(torch::kUInt8).contiguous();
    p.labels.insert(p.labels.end(), bytes.data_ptr<uint8_t>(), bytes.data_ptr<uint8_t>() + len);
  }
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (data->labels.defined()) p.accuracy = static_cast<double>(correct) / static_cast<double>(end - begin);
  return p;
}

// ---- round-based training ---------------------------------------------------

namespace {

Result<Shape> ShapeOf(const Arch& a) {
  TrainConfig c;
  c.model = a.model;
  c.width = a.width;
  c.layers = a.layers;
  c.dropout = a.dropout;
  CLAW_RETURN_IF_ERROR(CheckConfig(c));
  return Shape{a.model == "mlp" ? 0 : 1, a.width, a.layers, a.dropout};
}

rounds::Weights WeightsOf(Net& net) {
  rounds::Weights w;
  for (const auto& p : net->named_parameters()) {
    rounds::Named n;
    n.name = p.key();
    n.shape = p.value().sizes().vec();
    torch::Tensor t = p.value().detach().contiguous();
    n.values.assign(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    w.push_back(std::move(n));
  }
  std::sort(w.begin(), w.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return w;
}

// InvalidArgument naming the first tensor that is missing, extra or shaped
// otherwise than the model's.
Status LoadWeights(Net& net, const rounds::Weights& w) {
  auto params = net->named_parameters();
  std::map<std::string, const rounds::Named*> given;
  for (const auto& n : w) given[n.name] = &n;
  torch::NoGradGuard no_grad;
  for (auto& p : params) {
    auto it = given.find(p.key());
    if (it == given.end()) return InvalidArgument("model: no tensor " + p.key());
    const rounds::Named& n = *it->second;
    if (n.shape != p.value().sizes().vec() ||
        n.values.size() != static_cast<size_t>(p.value().numel())) {
      return InvalidArgument("model: tensor " + n.name + " has another shape than the model's");
    }
    p.value().copy_(torch::from_blob(const_cast<float*>(n.values.data()), p.value().sizes(),
                                     torch::kFloat32));
    given.erase(it);
  }
  if (!given.empty()) return InvalidArgument("model: tensor " + given.begin()->first + " is not the model's");
  return Status::Ok();
}

Result<std::vector<int64_t>> ShardIndices(const Split& train, const ShardSpec& s) {
  torch::Tensor labels = train.labels.contiguous();
  return ShardRows(train.images.size(0), labels.data_ptr<int64_t>(), s);
}

}  // namespace

Result<rounds::Weights> InitModel(const Arch& arch, uint64_t seed) {
  auto shape = ShapeOf(arch);
  if (!shape.ok()) return shape.status();
  torch::manual_seed(seed);
  Net net(*shape);
  return WeightsOf(net);
}

Result<std::string> CheckpointOf(const Arch& arch, const rounds::Weights& weights) {
  auto shape = ShapeOf(arch);
  if (!shape.ok()) return shape.status();
  Net net(*shape);
  CLAW_RETURN_IF_ERROR(LoadWeights(net, weights));
  torch::serialize::OutputArchive ar;
  net->save(ar);
  SaveShape(ar, *shape, 0);
  std::ostringstream bytes;
  ar.save_to(bytes);
  return bytes.str();
}

Result<RoundOutcome> TrainRound(const RoundConfig& c) {
  auto shape = ShapeOf(c.arch);
  if (!shape.ok()) return shape.status();
  if (c.steps < 0 || c.batch < 1 || c.threads < 1) return InvalidArgument("steps, batch, threads");
  if (c.optimizer != "adamw" && c.optimizer != "sgd") return InvalidArgument("optimizer: adamw or sgd");
  torch::set_num_threads(c.threads);
  Net net(*shape);
  CLAW_RETURN_IF_ERROR(LoadWeights(net, c.start));
  RoundOutcome out;
  if (c.eval_end > c.eval_begin) {
    auto test = LoadSplit(c.data.test_images, c.data.test_labels, 0);
    if (!test.ok()) return test.status();
    int64_t n = test->images.size(0);
    if (static_cast<int64_t>(c.eval_end) > n) {
      return InvalidArgument("eval: images [" + std::to_string(c.eval_begin) + ", " +
                             std::to_string(c.eval_end) + ") are outside the " +
                             std::to_string(n) + " test images");
    }
    torch::NoGradGuard no_grad;
    net->eval();
    for (int64_t at = static_cast<int64_t>(c.eval_begin); at < static_cast<int64_t>(c.eval_end);
         at += 1000) {
      int64_t len = std::min<int64_t>(1000, static_cast<int64_t>(c.eval_end) - at);
      auto logits = net->forward(test->images.narrow(0, at, len));
      auto y = test->labels.narrow(0, at, len);
      out.eval_loss_sum += torch::nn::functional::cross_entropy(
                               logits, y,
                               torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                               .item<double>();
      out.eval_correct += logits.argmax(1).eq(y).sum().item<int64_t>();
    }
    out.eval_count = static_cast<int64_t>(c.eval_end - c.eval_begin);
    net->train();
  }
  if (c.steps == 0) return out;

  auto train = LoadSplit(c.data.train_images, c.data.train_labels, c.shard.limit);
  if (!train.ok()) return train.status();
  auto shard = ShardIndices(*train, c.shard);
  if (!shard.ok()) return shard.status();
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (c.optimizer == "adamw") {
    optimizer = std::make_unique<torch::optim::AdamW>(
        net->parameters(), torch::optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(
        net->parameters(),
        torch::optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
  }
  auto start = std::chrono::steady_clock::now();
  torch::manual_seed(c.seed);  // dropout
  ShardBatches batches(std::move(*shard), c.seed);
  double loss_sum = 0;
  net->train();
  for (int step = 0; step < c.steps; ++step) {
    std::vector<int64_t> idx = batches.Next(static_cast<size_t>(c.batch));
    auto ids = torch::from_blob(idx.data(), {static_cast<int64_t>(idx.size())}, torch::kInt64);
    auto x = train->images.index_select(0, ids);
    auto y = train->labels.index_select(0, ids);
    optimizer->zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    optimizer->step();
    loss_sum += loss.item<double>();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.train_loss = loss_sum / c.steps;
  out.samples = static_cast<double>(c.steps) * c.batch;
  out.weights = WeightsOf(net);
  return out;
}

namespace {

// What libtorch throws (a label outside the model's classes, a shape that
// does not fit) becomes the task's error instead of ending its worker.
template <auto F>
struct Guard;
template <typename R, typename... A, R (*F)(A...)>
struct Guard<F> {
  static R Call(A... args) {
    try {
      return F(std::forward<A>(args)...);
    } catch (const c10::Error& e) {
      return InvalidArgument(std::string("libtorch: ") + e.what_without_backtrace());
    } catch (const std::exception& e) {
      return Internal(std::string("libtorch: ") + e.what());
    }
  }
};

}  // namespace

}  // namespace claw::ml

// The library's one exported symbol (api.h; everything else is hidden).
extern "C" __attribute__((visibility("default"))) const claw::ml::MlApi* claw_ml_api() {
  using claw::ml::Guard;
  static const claw::ml::MlApi api{claw::ml::kMlApiVersion,
                                   &Guard<&claw::ml::Train>::Call,
                                   &Guard<&claw::ml::Predict>::Call,
                                   &Guard<&claw::ml::CountImages>::Call,
                                   &Guard<&claw::ml::InitModel>::Call,
                                   &Guard<&claw::ml::TrainRound>::Call,
                                   &Guard<&claw::ml::CheckpointOf>::Call,
                                   &Guard<&claw::ml::InspectScript>::Call,
                                   &Guard<&claw::ml::TrainScript>::Call,
                                   &Guard<&claw::ml::PredictScript>::Call,
                                   &Guard<&claw::ml::ScriptTrainable>::Call,
                                   &Guard<&claw::ml::ScriptRound>::Call};
  return &api;
}


#include "apps/montecarlo.h"

#include <cmath>
#include <cstring>

#include "apps/random.h"
#include "core/json_fields.h"

namespace claw {
namespace {

enum class Model { kEuropeanCall, kEuropeanPut, kAsianCall, kPi };

struct Market {
  double s0 = 100, k = 100, r = 0.05, sigma = 0.2, t = 1;
  int64_t steps = 12;
};

struct TaskParams {
  Model model = Model::kPi;
  Market m;
  uint64_t paths = 0;
  uint64_t seed = 0;
  uint64_t stream = 0;
};

const std::vector<std::string> kModels = {"european_call", "european_put", "asian_call", "pi"};

Model ModelFromName(const std::string& s) {
  if (s == "european_call") return Model::kEuropeanCall;
  if (s == "european_put") return Model::kEuropeanPut;
  if (s == "asian_call") return Model::kAsianCall;
  return Model::kPi;
}

// Reads the model and market fields shared by job params and task params.
Status ReadMarket(const FieldReader& f, Model* model, Market* m) {
  auto name = f.OneOf("model", kModels, std::nullopt);
  if (!name.ok()) return name.status();
  *model = ModelFromName(*name);
  auto s0 = f.Number("S0", 1e-9, 1e12, 100.0);
  auto k = f.Number("K", 0, 1e12, 100.0);
  auto r = f.Number("r", -1, 1, 0.05);
  auto sigma = f.Number("sigma", 0, 10, 0.2);
  auto t = f.Number("T", 0, 100, 1.0);
  auto steps = f.Integer("steps", 1, 10'000, 12);
  for (const Status* st :
       {&s0.status(), &k.status(), &r.status(), &sigma.status(), &t.status(), &steps.status()}) {
    if (!st->ok()) return *st;
  }
  *m = Market{*s0, *k, *r, *sigma, *t, *steps};
  return Status::Ok();
}

MomentSummary Simulate(const TaskParams& p) {
  Xoshiro256 rng(p.seed, p.stream);
  MomentSummary acc;
  const Market& m = p.m;
  const double discount = std::exp(-m.r * m.t);
  switch (p.model) {
    case Model::kPi:
      for (uint64_t i = 0; i < p.paths; ++i) {
        double x = rng.Uniform(), y = rng.Uniform();
        acc.Add(x * x + y * y <= 1.0 ? 4.0 : 0.0);
      }
      break;
    case Model::kEuropeanCall:
    case Model::kEuropeanPut: {
      const double drift = (m.r - 0.5 * m.sigma * m.sigma) * m.t;
      const double vol = m.sigma * std::sqrt(m.t);
      const bool call = p.model == Model::kEuropeanCall;
      for (uint64_t i = 0; i < p.paths; ++i) {
        double st = m.s0 * std::exp(drift + vol * rng.Normal());
        double payoff = call ? std::max(st - m.k, 0.0) : std::max(m.k - st, 0.0);
        acc.Add(discount * payoff);
      }
      break;
    }
    case Model::kAsianCall: {
      const double dt = m.t / static_cast<double>(m.steps);
      const double drift = (m.r - 0.5 * m.sigma * m.sigma) * dt;
      const double vol = m.sigma * std::sqrt(dt);
      for (uint64_t i = 0; i < p.paths; ++i) {
        double log_s = std::log(m.s0), sum = 0;
        for (int64_t s = 0; s < m.steps; ++s) {
          log_s += drift + vol * rng.Normal();
          sum += std::exp(log_s);
        }
        double avg = sum / static_cast<double>(m.steps);
        acc.Add(discount * std::max(avg - m.k, 0.0));
      }
      break;
    }
  }
  return acc;
}

double CostPerPath(Model model, int64_t steps) {
  switch (model) {
    case Model::kPi: return 20;
    case Model::kAsianCall: return 60.0 * static_cast<double>(steps);
    default: return 60;
  }
}

void PutLe64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t GetLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

void MomentSummary::Merge(const MomentSummary& o) {
  if (o.count == 0) return;
  if (count == 0) {
    *this = o;
    return;
  }
  double na = static_cast<double>(count), nb = static_cast<double>(o.count);
  double n = na + nb;
  double delta = o.mean - mean;
  mean += delta * nb / n;
  m2 += o.m2 + delta * delta * na * nb / n;
  count += o.count;
}

std::string MomentSummary::Encode() const {
  std::string out(24, '\0');
  uint64_t bits;
  PutLe64(out.data(), count);
  std::memcpy(&bits, &mean, 8);
  PutLe64(out.data() + 8, bits);
  std::memcpy(&bits, &m2, 8);
  PutLe64(out.data() + 16, bits);
  return out;
}

Result<MomentSummary> MomentSummary::Decode(std::string_view bytes) {
  if (bytes.size() != 24) {
    return InvalidArgument("montecarlo output: expected 24 bytes, got " +
                           std::to_string(bytes.size()));
  }
  MomentSummary s;
  s.count = GetLe64(bytes.data());
  uint64_t bits = GetLe64(bytes.data() + 8);
  std::memcpy(&s.mean, &bits, 8);
  bits = GetLe64(bytes.data() + 16);
  std::memcpy(&s.m2, &bits, 8);
  if (!std::isfinite(s.mean) || !std::isfinite(s.m2) || s.m2 < 0) {
    return InvalidArgument("montecarlo output: non-finite or negative moments");
  }
  return s;
}

double BlackScholes(bool call, double s0, double k, double r, double sigma, double t) {
  auto n = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  if (sigma <= 0 || t <= 0) {
    double fwd = s0 - k * std::exp(-r * t);
    return call ? std::max(fwd, 0.0) : std::max(-fwd, 0.0);
  }
  double d1 = (std::log(s0 / k) + (r + 0.5 * sigma * sigma) * t) / (sigma * std::sqrt(t));
  double d2 = d1 - sigma * std::sqrt(t);
  if (call) return s0 * n(d1) - k * std::exp(-r * t) * n(d2);
  return k * std::exp(-r * t) * n(-d2) - s0 * n(-d1);
}

Result<std::vector<TaskSpec>> MonteCarloApp::Plan(const JobSpec& spec) const {
  FieldReader f(spec.params, "params");
  CLAW_RETURN_IF_ERROR(
      f.NoUnknownFields({"model", "paths", "S0", "K", "r", "sigma", "T", "steps"}));
  Model model;
  Market m;
  CLAW_RETURN_IF_ERROR(ReadMarket(f, &model, &m));
  auto paths = f.Integer("paths", 1, static_cast<int64_t>(kMaxPaths), std::nullopt);
  if (!paths.ok()) return paths.status();
  uint64_t total = static_cast<uint64_t>(*paths);
  uint64_t tasks = spec.tasks;
  if (tasks == 0) tasks = std::min<uint64_t>(10'000, std::max<uint64_t>(1, (total + 999'999) / 1'000'000));
  if (tasks > total) {
    return InvalidArgument("spec.tasks: " + std::to_string(tasks) + " tasks for " +
                           std::to_string(total) + " paths leaves some tasks without a path");
  }
  uint64_t per = total / tasks, extra = total % tasks;
  if (per + (extra ? 1 : 0) > kMaxPathsPerTask) {
    return InvalidArgument("params.paths: " + std::to_string(per) +
                           " paths per task is above the limit of " +
                           std::to_string(kMaxPathsPerTask) + "; use more tasks");
  }
  nlohmann::json base = spec.params;
  base["seed"] = spec.seed;
  std::vector<TaskSpec> out;
  out.reserve(tasks);
  double cost = CostPerPath(model, m.steps);
  for (uint64_t i = 0; i < tasks; ++i) {
    uint64_t n = per + (i < extra ? 1 : 0);
    base["paths"] = n;
    base["stream"] = i;
    out.push_back(TaskSpec{base.dump(), cost * static_cast<double>(n)});
  }
  return out;
}

Result<std::string> MonteCarloApp::Run(std::string_view task_params, const RunContext&) const {
  nlohmann::json j = nlohmann::json::parse(task_params, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("task params: malformed JSON");
  FieldReader f(j, "task");
  TaskParams p;
  CLAW_RETURN_IF_ERROR(ReadMarket(f, &p.model, &p.m));
  auto paths = f.Integer("paths", 1, static_cast<int64_t>(kMaxPathsPerTask), std::nullopt);
  auto seed = f.Unsigned("seed", std::nullopt);
  auto stream = f.Unsigned("stream", std::nullopt);
  for (const Status* st : {&paths.status(), &seed.status(), &stream.status()}) {
    if (!st->ok()) return *st;
  }
  p.paths = static_cast<uint64_t>(*paths);
  p.seed = *seed;
  p.stream = *stream;
  return Simulate(p).Encode();
}

Result<nlohmann::json> MonteCarloApp::Merge(const JobSpec& spec,
                                            const std::vector<std::string_view>& outputs) const {
  MomentSummary total;
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto s = MomentSummary::Decode(outputs[i]);
    if (!s.ok()) return InvalidArgument("task " + std::to_string(i) + ": " + s.status().message());
    total.Merge(*s);
  }
  FieldReader f(spec.params, "params");
  Model model;
  Market m;
  CLAW_RETURN_IF_ERROR(ReadMarket(f, &model, &m));
  double n = static_cast<double>(total.count);
  double se = total.count > 1 ? std::sqrt(total.m2 / (n - 1) / n) : 0;
  nlohmann::json out = {{"model", spec.params.value("model", "")},
                        {"paths", total.count},
                        {"estimate", total.mean},
                        {"std_error", se},
                        {"ci95", {total.mean - 1.96 * se, total.mean + 1.96 * se}}};
  if (model == Model::kEuropeanCall || model == Model::kEuropeanPut) {
    out["reference"] = BlackScholes(model == Model::kEuropeanCall, m.s0, m.k, m.r, m.sigma, m.t);
    out["reference_name"] = "Black-Scholes";
  } else if (model == Model::kPi) {
    out["reference"] = M_PI;
    out["reference_name"] = "pi";
  }
  return out;
}

bool MonteCarloApp::Equivalent(std::string_view, std::string_view a, std::string_view b) const {
  auto x = MomentSummary::Decode(a), y = MomentSummary::Decode(b);
  if (!x.ok() || !y.ok() || x->count != y->count) return false;
  // Same stream, same algorithm: only the last bits of exp/log may differ
  // between chips and math libraries.
  auto close = [](double p, double q) {
    return std::abs(p - q) <= 1e-9 * std::max({1.0, std::abs(p), std::abs(q)});
  };
  return close(x->mean, y->mean) && close(x->m2, y->m2);
}

}  // namespace claw

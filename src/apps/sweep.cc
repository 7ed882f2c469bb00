#include "apps/sweep.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/json_fields.h"

namespace claw {
namespace {

using nlohmann::json;

// A trial's metric: in its "final" object, or at its top level; NaN if absent.
double MetricOf(const json& trial, const std::string& metric) {
  for (const json* where : {trial.contains("final") ? &trial["final"] : nullptr, &trial}) {
    if (where && where->contains(metric) && (*where)[metric].is_number()) {
      return (*where)[metric].get<double>();
    }
  }
  return std::nan("");
}

Result<std::vector<json>> Grid(const json& space) {
  std::vector<json> points = {json::object()};
  for (const auto& [name, values] : space.items()) {
    if (!values.is_array() || values.empty()) {
      return InvalidArgument("params.space." + name + ": a grid needs a non-empty list of values");
    }
    if (points.size() * values.size() > SweepApp::kMaxTrials) {
      return InvalidArgument("params.space: the grid has more than " +
                             std::to_string(SweepApp::kMaxTrials) + " points");
    }
    std::vector<json> next;
    next.reserve(points.size() * values.size());
    for (const json& p : points) {
      for (const json& v : values) {
        json q = p;
        q[name] = v;
        next.push_back(std::move(q));
      }
    }
    points = std::move(next);
  }
  return points;
}

// One value of `name` drawn from its distribution.
Result<json> Draw(const std::string& name, const json& d, std::mt19937_64& rng) {
  std::string field = "params.space." + name;
  if (d.is_array()) {
    if (d.empty()) return InvalidArgument(field + ": an empty list");
    return d[std::uniform_int_distribution<size_t>(0, d.size() - 1)(rng)];
  }
  if (!d.is_object() || d.size() != 1) {
    return InvalidArgument(field + ": a list, or one of {\"uniform\": [a, b]}, "
                           "{\"log_uniform\": [a, b]}, {\"int_uniform\": [a, b]}, {\"choice\": [...]}");
  }
  const auto& [kind, arg] = *d.items().begin();
  if (kind == "choice") return Draw(name, arg, rng);
  if (!arg.is_array() || arg.size() != 2 || !arg[0].is_number() || !arg[1].is_number() ||
      arg[0].get<double>() > arg[1].get<double>()) {
    return InvalidArgument(field + "." + kind + ": must be [low, high] with low <= high");
  }
  double a = arg[0], b = arg[1];
  if (kind == "uniform") return json(std::uniform_real_distribution<double>(a, b)(rng));
  if (kind == "int_uniform") {
    if (std::ceil(a) > std::floor(b)) return InvalidArgument(field + ".int_uniform: no integer in range");
    return json(std::uniform_int_distribution<int64_t>(static_cast<int64_t>(std::ceil(a)),
                                                       static_cast<int64_t>(std::floor(b)))(rng));
  }
  if (kind == "log_uniform") {
    if (a <= 0) return InvalidArgument(field + ".log_uniform: bounds must be positive");
    return json(std::exp(std::uniform_real_distribution<double>(std::log(a), std::log(b))(rng)));
  }
  return InvalidArgument(field + ": unknown distribution '" + kind + "'");
}

}  // namespace

const App* SweepApp::Inner(std::string_view name) const {
  auto it = apps_.find(name);
  return it == apps_.end() ? nullptr : it->second;
}

Result<std::vector<json>> SweepApp::Points(const JobSpec& spec) {
  const json& p = spec.params;
  FieldReader f(p, "params");
  auto method = f.OneOf("method", {"grid", "random"}, "grid");
  if (!method.ok()) return method.status();
  if (!p.contains("space") || !p["space"].is_object() || p["space"].empty()) {
    return InvalidArgument("params.space: an object of the swept parameters, e.g. "
                           "{\"lr\": [0.001, 0.01, 0.1]}");
  }
  const json& space = p["space"];
  if (*method == "grid") return Grid(space);
  auto trials = f.Integer("trials", 1, kMaxTrials, 20);
  if (!trials.ok()) return trials.status();
  std::mt19937_64 rng(spec.seed);
  std::vector<json> points;
  points.reserve(static_cast<size_t>(*trials));
  for (int64_t i = 0; i < *trials; ++i) {
    json point = json::object();
    for (const auto& [name, d] : space.items()) {
      auto v = Draw(name, d, rng);
      if (!v.ok()) return v.status();
      point[name] = *v;
    }
    points.push_back(std::move(point));
  }
  return points;
}

Result<std::vector<TaskSpec>> SweepApp::Plan(const JobSpec& spec) const {
  FieldReader f(spec.params, "params");
  CLAW_RETURN_IF_ERROR(
      f.NoUnknownFields({"app", "base", "space", "method", "trials", "metric", "mode"}));
  auto inner_name = f.String("app", 64, "train");
  if (!inner_name.ok()) return inner_name.status();
  const App* inner = Inner(*inner_name);
  if (!inner || inner == this) {
    return InvalidArgument("params.app: '" + *inner_name + "' is not an app a sweep can run");
  }
  auto metric = f.String("metric", 64, "test_accuracy");
  auto mode = f.OneOf("mode", {"max", "min"}, "max");
  if (!metric.ok()) return metric.status();
  if (!mode.ok()) return mode.status();
  json base = spec.params.value("base", json::object());
  if (!base.is_object()) return InvalidArgument("params.base: must be an object");
  auto points = Points(spec);
  if (!points.ok()) return points.status();
  if (spec.tasks != 0 && spec.tasks != points->size()) {
    return InvalidArgument("spec.tasks: the sweep makes " + std::to_string(points->size()) +
                           " trials; leave tasks out");
  }
  std::vector<TaskSpec> tasks;
  tasks.reserve(points->size());
  for (size_t i = 0; i < points->size(); ++i) {
    JobSpec trial;
    trial.app = *inner_name;
    trial.seed = spec.seed;
    trial.params = base;
    trial.params.update((*points)[i]);
    auto planned = inner->Plan(trial);
    if (!planned.ok()) {
      return Status(planned.status().code(), "trial " + std::to_string(i) + " " +
                                                 (*points)[i].dump() + ": " +
                                                 planned.status().message());
    }
    if (planned->size() != 1) {
      return InvalidArgument("params.app: a sweep's app must plan one task per trial");
    }
    json params = {{"app", *inner_name}, {"trial", i}, {"values", (*points)[i]},
                   {"task", planned->front().params}};
    tasks.push_back(TaskSpec{params.dump(), planned->front().cost_flop});
  }
  return tasks;
}

Result<std::string> SweepApp::Run(std::string_view task_params, const RunContext& ctx) const {
  json p = json::parse(task_params, nullptr, false);
  if (!p.is_object() || !p.contains("task") || !p["task"].is_string() || !p.contains("app") ||
      !p["app"].is_string()) {
    return InvalidArgument("sweep task: malformed parameters");
  }
  const App* inner = Inner(p["app"].get<std::string>());
  if (!inner || inner == this) return InvalidArgument("sweep task: unknown app");
  auto out = inner->Run(p["task"].get<std::string>(), ctx);
  if (!out.ok()) return out.status();
  json o = json::parse(*out, nullptr, false);
  if (!o.is_object()) o = json{{"output", *out}};
  o["trial"] = p.value("trial", 0);
  o["values"] = p.value("values", json::object());
  o["app"] = p["app"];
  return o.dump();
}

Result<json> SweepApp::Merge(const JobSpec& spec, const std::vector<std::string_view>& outputs) const {
  std::string metric = spec.params.value("metric", "test_accuracy");
  bool maximize = spec.params.value("mode", "max") == "max";
  json trials = json::array();
  std::vector<std::pair<double, size_t>> ranked;
  for (size_t i = 0; i < outputs.size(); ++i) {
    json t = json::parse(outputs[i], nullptr, false);
    if (!t.is_object()) return InvalidArgument("a sweep trial's output is not JSON");
    double m = MetricOf(t, metric);
    if (!std::isnan(m)) ranked.emplace_back(maximize ? -m : m, i);
    trials.push_back(std::move(t));
  }
  std::stable_sort(ranked.begin(), ranked.end());
  json ranking = json::array();
  for (const auto& [m, i] : ranked) ranking.push_back(i);
  json out = {{"metric", metric}, {"mode", maximize ? "max" : "min"}, {"trials", trials},
              {"ranking", ranking}};
  if (!ranked.empty()) {
    size_t b = ranked.front().second;
    out["best"] = {{"trial", b}, {"values", trials[b]["values"]}, {"metric", MetricOf(trials[b], metric)}};
  }
  return out;
}

bool SweepApp::Equivalent(std::string_view a, std::string_view b) const {
  json x = json::parse(a, nullptr, false), y = json::parse(b, nullptr, false);
  if (!x.is_object() || !y.is_object() || x.value("app", "") != y.value("app", "") ||
      x.value("values", json()) != y.value("values", json())) {
    return a == b;
  }
  const App* inner = Inner(x.value("app", ""));
  return inner && inner != this ? inner->Equivalent(a, b) : a == b;
}

std::vector<std::string> SweepApp::SpecInputBlobs(const JobSpec& spec) const {
  const App* inner = Inner(spec.params.value("app", "train"));
  if (!inner || inner == this) return {};
  JobSpec base;
  base.app = inner->Name();
  base.params = spec.params.value("base", json::object());
  return inner->SpecInputBlobs(base);
}

std::vector<std::string> SweepApp::TaskInputBlobs(std::string_view task_params) const {
  json p = json::parse(task_params, nullptr, false);
  if (!p.is_object() || !p.contains("task") || !p["task"].is_string()) return {};
  const App* inner = Inner(p.value("app", ""));
  return inner && inner != this ? inner->TaskInputBlobs(p["task"].get<std::string>())
                                : std::vector<std::string>{};
}

std::vector<std::string> SweepApp::OutputBlobs(std::string_view task_output) const {
  json o = json::parse(task_output, nullptr, false);
  const App* inner = o.is_object() ? Inner(o.value("app", "")) : nullptr;
  return inner && inner != this ? inner->OutputBlobs(task_output) : std::vector<std::string>{};
}

}  // namespace claw

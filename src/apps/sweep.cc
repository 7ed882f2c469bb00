#include "apps/sweep.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <set>
#include <tuple>

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
  const std::string kind = d.begin().key();
  const json& arg = d.begin().value();
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

Result<SweepApp::Asha> SweepApp::ReadAsha(const json& params) {
  Asha a;
  json cfg = params.value("asha", json::object());
  if (!cfg.is_object()) return InvalidArgument("params.asha: must be an object");
  FieldReader f(cfg, "params.asha");
  CLAW_RETURN_IF_ERROR(f.NoUnknownFields({"min_epochs", "max_epochs", "eta"}));
  auto lo = f.Integer("min_epochs", 1, 1000, 1);
  auto hi = f.Integer("max_epochs", 1, 1000, 9);
  auto eta = f.Integer("eta", 2, 16, 3);
  for (const Status* st : {&lo.status(), &hi.status(), &eta.status()}) {
    if (!st->ok()) return *st;
  }
  if (*hi < *lo) return InvalidArgument("params.asha.max_epochs: below min_epochs");
  a.min_epochs = *lo;
  a.max_epochs = *hi;
  a.eta = *eta;
  for (int64_t r = *lo; r <= *hi; r *= *eta) a.rungs.push_back(r);
  return a;
}

Result<std::vector<json>> SweepApp::Points(const JobSpec& spec) {
  const json& p = spec.params;
  FieldReader f(p, "params");
  auto method = f.OneOf("method", {"grid", "random", "asha"}, "grid");
  if (!method.ok()) return method.status();
  if (!p.contains("space") || !p["space"].is_object() || p["space"].empty()) {
    return InvalidArgument("params.space: an object of the swept parameters, e.g. "
                           "{\"lr\": [0.001, 0.01, 0.1]}");
  }
  const json& space = p["space"];
  if (*method == "grid" || (*method == "asha" && !p.contains("trials"))) return Grid(space);
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
      f.NoUnknownFields({"app", "base", "space", "method", "trials", "metric", "mode", "asha"}));
  std::optional<Asha> asha;
  if (spec.params.value("method", "") == "asha") {
    auto a = ReadAsha(spec.params);
    if (!a.ok()) return a.status();
    asha = *a;
  }
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
    if (asha) {  // every trial starts at the first rung, and keeps its model
      trial.params["epochs"] = asha->rungs.front();
      trial.params["save_model"] = true;
    }
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
    if (asha) params["rung"] = 0;
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
  if (p.contains("rung")) o["rung"] = p["rung"];
  return o.dump();
}

Result<json> SweepApp::Merge(const JobSpec& spec, const std::vector<std::string_view>& outputs) const {
  std::string metric = spec.params.value("metric", "test_accuracy");
  bool maximize = spec.params.value("mode", "max") == "max";
  // Each trial's latest output: under asha, the one at its highest rung.
  std::map<int64_t, json> latest;
  int64_t trial_epochs = 0;
  for (std::string_view o : outputs) {
    json t = json::parse(o, nullptr, false);
    if (!t.is_object()) return InvalidArgument("a sweep trial's output is not JSON");
    trial_epochs += static_cast<int64_t>(t.value("epochs", json::array()).size());
    int64_t trial = t.value("trial", int64_t{0});
    auto it = latest.find(trial);
    if (it == latest.end() || it->second.value("rung", 0) < t.value("rung", 0)) {
      latest[trial] = std::move(t);
    }
  }
  json trials = json::array();
  int64_t top_rung = 0;
  for (const auto& [trial, t] : latest) top_rung = std::max(top_rung, t.value("rung", int64_t{0}));
  // Rank by rung reached (higher first), then by the metric.
  std::vector<std::tuple<int64_t, double, size_t>> ranked;
  for (auto& [trial, t] : latest) {
    double m = MetricOf(t, metric);
    // Why a trial has no final metric, or stopped short: said, not left as nan.
    if (t.value("diverged", false)) {
      const json fin = t.value("final", json::object());
      t["why"] = "diverged at epoch " + std::to_string(fin.value("epoch", int64_t{0})) +
                 " (its loss was not finite)";
    } else if (std::isnan(m)) {
      t["why"] = "no " + metric + " in its output";
    } else if (t.value("rung", int64_t{0}) < top_rung) {
      t["why"] = "stopped at rung " + std::to_string(t.value("rung", int64_t{0})) +
                 " (ASHA promoted better trials)";
    }
    if (!std::isnan(m)) ranked.emplace_back(-t.value("rung", int64_t{0}), maximize ? -m : m, trials.size());
    trials.push_back(std::move(t));
  }
  std::stable_sort(ranked.begin(), ranked.end());
  json ranking = json::array();
  for (const auto& r : ranked) ranking.push_back(std::get<2>(r));
  json out = {{"metric", metric},   {"mode", maximize ? "max" : "min"}, {"trials", trials},
              {"ranking", ranking}, {"compute", {{"tasks", outputs.size()}, {"trial_epochs", trial_epochs}}}};
  if (!ranked.empty()) {
    size_t b = std::get<2>(ranked.front());
    out["best"] = {{"trial", b}, {"values", trials[b]["values"]}, {"metric", MetricOf(trials[b], metric)}};
  }
  return out;
}

std::vector<std::string> SweepApp::Needs(const JobSpec& spec) const {
  std::string name = spec.params.is_object() ? spec.params.value("app", "train") : "train";
  const App* inner = Inner(name);
  if (!inner || inner == this) return {"sweep", name};
  JobSpec trial;  // what a trial needs, by the base every trial shares
  trial.app = name;
  trial.params = spec.params.is_object() ? spec.params.value("base", json::object()) : json::object();
  std::vector<std::string> out = inner->Needs(trial);
  out.insert(out.begin(), "sweep");
  return out;
}

bool SweepApp::Grows(const JobSpec& spec) const {
  return spec.params.is_object() && spec.params.value("method", "") == "asha";
}

std::vector<TaskSpec> SweepApp::Expand(const JobSpec& spec, const std::vector<TaskView>& tasks,
                                       uint32_t settled) const {
  auto asha = ReadAsha(spec.params);
  if (!asha.ok() || settled >= tasks.size()) return {};
  std::string metric = spec.params.value("metric", "test_accuracy");
  bool maximize = spec.params.value("mode", "max") == "max";
  json done = json::parse(tasks[settled].params, nullptr, false);
  if (!done.is_object()) return {};
  const int64_t rung = done.value("rung", int64_t{0});
  if (rung + 1 >= static_cast<int64_t>(asha->rungs.size())) return {};  // the top rung
  // The trials finished at this rung, and those already promoted from it.
  struct Finished {
    double key;  // smaller is better
    int64_t trial;
    json task;   // its params
    json checkpoint;
  };
  std::vector<Finished> finished;
  std::set<int64_t> promoted;
  for (const TaskView& t : tasks) {
    json p = json::parse(t.params, nullptr, false);
    if (!p.is_object()) continue;
    int64_t r = p.value("rung", int64_t{0}), trial = p.value("trial", int64_t{0});
    if (r == rung + 1) promoted.insert(trial);
    if (r != rung || t.output.empty()) continue;
    json o = json::parse(t.output, nullptr, false);
    double m = MetricOf(o, metric);
    auto files = o.value("files", json::array());
    if (std::isnan(m) || files.empty()) continue;
    // What the next rung goes on from: the trial's "resume" when it names
    // one (a script trial's parameters and optimizer state), else its
    // checkpoint, the first file.
    json resume = o.contains("resume") ? o["resume"] : json(files[0].value("sha256", ""));
    finished.push_back({maximize ? -m : m, trial, std::move(p), std::move(resume)});
  }
  std::sort(finished.begin(), finished.end(), [](const Finished& a, const Finished& b) {
    return std::tie(a.key, a.trial) < std::tie(b.key, b.trial);
  });
  const App* inner = Inner(done.value("app", ""));
  std::vector<TaskSpec> out;
  size_t top = finished.size() / static_cast<size_t>(asha->eta);
  for (size_t i = 0; i < top && inner; ++i) {
    Finished& f = finished[i];
    if (promoted.count(f.trial)) continue;
    // The same trial, resumed from its checkpoint to the next rung's epochs.
    JobSpec next;
    next.app = inner->Name();
    next.seed = spec.seed;
    next.params = json::parse(f.task.value("task", "{}"), nullptr, false);
    next.params["epochs"] = asha->rungs[static_cast<size_t>(rung + 1)];
    next.params["resume"] = f.checkpoint;
    auto planned = inner->Plan(next);
    if (!planned.ok() || planned->size() != 1) continue;
    json params = {{"app", f.task["app"]},   {"trial", f.trial},       {"values", f.task["values"]},
                   {"task", planned->front().params}, {"rung", rung + 1}};
    out.push_back(TaskSpec{params.dump(), planned->front().cost_flop});
  }
  return out;
}

bool SweepApp::Equivalent(std::string_view params, std::string_view a, std::string_view b) const {
  json x = json::parse(a, nullptr, false), y = json::parse(b, nullptr, false);
  if (!x.is_object() || !y.is_object() || x.value("app", "") != y.value("app", "") ||
      x.value("values", json()) != y.value("values", json())) {
    return a == b;
  }
  const App* inner = Inner(x.value("app", ""));
  if (!inner || inner == this) return a == b;
  json p = json::parse(params, nullptr, false);  // the inner task's own params
  std::string task = p.is_object() && p.contains("task") && p["task"].is_string()
                         ? p["task"].get<std::string>()
                         : std::string();
  return inner->Equivalent(task, a, b);
}

std::vector<std::string> SweepApp::SpecInputBlobs(const JobSpec& spec) const {
  const App* inner = Inner(spec.params.value("app", "train"));
  if (!inner || inner == this) return {};
  JobSpec base;
  base.app = inner->Name();
  base.params = spec.params.value("base", json::object());
  std::vector<std::string> out = inner->SpecInputBlobs(base);
  // Blobs swept over (a list of modules, say): each value in the base.
  const json space = spec.params.value("space", json::object());
  if (!base.params.is_object() || !space.is_object()) return out;
  for (const auto& [name, values] : space.items()) {
    if (!values.is_array()) continue;
    for (const json& v : values) {
      JobSpec one = base;
      one.params[name] = v;
      for (std::string& h : inner->SpecInputBlobs(one)) {
        if (std::find(out.begin(), out.end(), h) == out.end()) out.push_back(std::move(h));
      }
    }
  }
  return out;
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

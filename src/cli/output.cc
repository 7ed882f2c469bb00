#include "cli/output.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "common/blobs.h"
#include "common/text.h"
#include "coordinator/coordinator.h"
#include "rounds/training_spec.h"

namespace claw {

std::string OneLine(std::string_view text, size_t max) {
  std::string flat(text);
  std::replace_if(
      flat.begin(), flat.end(), [](char c) { return c == '\n' || c == '\r' || c == '\t'; }, ' ');
  std::string line = EscapeControl(flat);
  if (max == 0 || line.size() <= max) return line;
  size_t cut = max > 3 ? max - 3 : 0;
  // Escaped text is valid UTF-8: cut between characters, not inside one.
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
  return line.substr(0, cut) + "...";
}

std::string TerminalBlock(std::string_view text, std::string_view indent) {
  std::string escaped = EscapeControl(text, TextLayout::kMultiLine);
  if (indent.empty()) return escaped;
  std::string out;
  out.reserve(escaped.size());
  for (char c : escaped) {
    out += c;
    if (c == '\n') out += indent;
  }
  return out;
}

void DrawProgress(const v1::JobInfo& info) {
  static int last_decile = -1;
  static std::string last_waiting;
  if (info.waiting() != last_waiting) {  // why it is stuck, once each time it changes
    last_waiting = info.waiting();
    if (!last_waiting.empty()) {
      std::fprintf(stderr, "%s%s: waiting: %s\n", isatty(2) ? "\n" : "", info.job_id().c_str(),
                   OneLine(last_waiting).c_str());
    }
  }
  double frac = info.tasks_total() ? static_cast<double>(info.tasks_done()) / info.tasks_total() : 0;
  if (!info.progress().empty()) {  // a training job: its round, accuracy and loss
    static std::string last_progress;
    if (info.progress() == last_progress && info.state() == "running") return;
    last_progress = info.progress();
    std::string end = info.state() == "running" || info.state() == "done" ? "" : " (" + info.state() + ")";
    std::fprintf(stderr, "%s: %s%s\n", info.job_id().c_str(), OneLine(info.progress()).c_str(),
                 end.c_str());
    return;
  }
  if (!isatty(2)) {
    int decile = static_cast<int>(frac * 10);
    if (decile == last_decile) return;
    last_decile = decile;
    std::fprintf(stderr, "%s: %3.0f%% %u/%u tasks\n", info.job_id().c_str(), frac * 100,
                 info.tasks_done(), info.tasks_total());
    return;
  }
  constexpr int kWidth = 40;
  int filled = static_cast<int>(frac * kWidth);
  std::string bar(filled, '#');
  bar.append(kWidth - filled, '.');
  std::fprintf(stderr, "\r[%s] %3.0f%%  %u/%u tasks  %u running  %s   ", bar.c_str(), frac * 100,
               info.tasks_done(), info.tasks_total(), info.tasks_running(), info.state().c_str());
  if (info.state() != "running") std::fprintf(stderr, "\n");
}

namespace {

std::string ValueText(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v.get<double>());
    return buf;
  }
  return v.dump();
}

// train and sweep results: one row per trial, best first where ranked.
void PrintTrials(const nlohmann::json& r, bool csv) {
  const auto& trials = r["trials"];
  std::vector<size_t> order;
  if (r.contains("ranking") && r["ranking"].is_array()) {
    for (const auto& i : r["ranking"]) order.push_back(i.get<size_t>());
  }
  for (size_t i = 0; i < trials.size(); ++i) {  // unranked ones (no metric) last
    if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
  }
  std::vector<std::string> names;  // the swept values' names, in order
  for (const auto& t : trials) {
    const nlohmann::json values = t.value("values", nlohmann::json::object());
    for (const auto& [k, v] : values.items()) {
      if (std::find(names.begin(), names.end(), k) == names.end()) names.push_back(k);
    }
  }
  const char* metrics[] = {"loss", "test_loss", "test_accuracy"};
  if (csv) {
    std::printf("rank,trial");
    for (const auto& n : names) std::printf(",%s", n.c_str());
    std::printf(",epochs,loss,test_loss,test_accuracy,seconds,model,why\n");
  } else {
    std::printf("%4s %5s", "RANK", "TRIAL");
    for (const auto& n : names) std::printf(" %10.10s", OneLine(n).c_str());
    std::printf(" %6s %9s %9s %9s %8s  %s\n", "EPOCHS", "LOSS", "TEST_LOSS", "TEST_ACC", "SECONDS", "WHY");
  }
  // A metric the trial does not have: empty in CSV, "-" in the table (never nan).
  auto metric_csv = [](const nlohmann::json& fin, const char* m) -> std::string {
    if (!fin.contains(m) || !fin[m].is_number()) return "";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", fin[m].get<double>());
    return buf;
  };
  auto metric_cell = [](const nlohmann::json& fin, const char* m) -> std::string {
    char buf[32];
    if (!fin.contains(m) || !fin[m].is_number()) return "-";
    std::snprintf(buf, sizeof buf, "%.4f", fin[m].get<double>());
    return buf;
  };
  auto csv_field = [](const std::string& v) {
    if (v.find_first_of(",\"\n") == std::string::npos) return v;
    std::string q = "\"";
    for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  for (size_t rank = 0; rank < order.size(); ++rank) {
    const auto& t = trials[order[rank]];
    const nlohmann::json fin = t.value("final", nlohmann::json::object());
    double seconds = 0;
    for (const auto& e : t.value("epochs", nlohmann::json::array())) seconds += e.value("seconds", 0.0);
    std::string model;
    if (t.contains("files") && !t["files"].empty()) model = t["files"][0].value("sha256", "");
    const auto values = t.value("values", nlohmann::json::object());
    if (csv) {
      std::printf("%zu,%zu", rank + 1, order[rank]);
      for (const auto& n : names) std::printf(",%s", values.contains(n) ? ValueText(values[n]).c_str() : "");
      std::printf(",%d", fin.value("epoch", 0));
      for (const char* m : metrics) std::printf(",%s", metric_csv(fin, m).c_str());
      std::printf(",%.3f,%s,%s\n", seconds, model.c_str(), csv_field(t.value("why", "")).c_str());
    } else {
      std::printf("%4zu %5zu", rank + 1, order[rank]);
      for (const auto& n : names) {
        std::printf(" %10.10s", values.contains(n) ? OneLine(ValueText(values[n])).c_str() : "-");
      }
      std::printf(" %6d %9s %9s %9s %8.2f  %s\n", fin.value("epoch", 0),
                  metric_cell(fin, "loss").c_str(), metric_cell(fin, "test_loss").c_str(),
                  metric_cell(fin, "test_accuracy").c_str(), seconds,
                  OneLine(t.value("why", "")).c_str());
    }
  }
}

}  // namespace

std::optional<size_t> BestTrial(const nlohmann::json& r) {
  if (!r.is_object() || !r.contains("best")) return std::nullopt;
  const nlohmann::json& b = r["best"];
  const nlohmann::json& index = b.is_object() ? b.value("trial", nlohmann::json()) : b;
  if (!index.is_number_integer() || index.get<int64_t>() < 0) return std::nullopt;
  size_t i = index.get<size_t>();
  if (!r.contains("trials") || !r["trials"].is_array() || i >= r["trials"].size()) {
    return std::nullopt;
  }
  return i;
}

namespace {

std::string Cell(const nlohmann::json& o, const char* key, const char* format, double scale = 1) {
  if (!o.is_object() || !o.contains(key) || !o[key].is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, o[key].get<double>() * scale);
  return buf;
}

// What a private training spent, in a line or two.
void PrintPrivacySpent(const nlohmann::json& p) {
  std::string budget = p.contains("epsilon") ? ", budget " + Cell(p, "epsilon", "%g") : "";
  std::printf("  privacy: ε = %s spent at δ = %s over %lld rounds%s (each %s's delta clipped to "
              "%s, Gaussian noise of %s × that added to their sum by the %s; secure aggregation %s)\n",
              Cell(p, "epsilon_spent", "%.3f").c_str(), Cell(p, "delta", "%g").c_str(),
              static_cast<long long>(p.value("rounds_private", int64_t{0})), budget.c_str(),
              OneLine(p.value("unit", "device")).c_str(), Cell(p, "clip_norm", "%g").c_str(),
              Cell(p, "noise_multiplier", "%g").c_str(), "coordinator",
              p.value("secure_aggregation", false) ? "on, each device clipping its own"
                                                   : "off");
  if (p.contains("stopped") && p["stopped"].is_string()) {
    std::printf("  training stopped %s\n", OneLine(p["stopped"].get<std::string>(), 200).c_str());
  }
}

// A training job's rounds: the test accuracy and loss of each round's model,
// who took part, what was refused, and the bytes each way.
void PrintTraining(const v1::JobInfo& job, const nlohmann::json& r, bool csv) {
  std::map<int64_t, nlohmann::json> eval, rounds;
  for (const auto& p : r["curve"]) {
    if (p.is_object()) eval[p.value("round", int64_t{0})] = p;
  }
  std::set<std::string> agents;
  for (const auto& p : r.value("rounds", nlohmann::json::array())) {
    if (!p.is_object()) continue;
    rounds[p.value("round", int64_t{0})] = p;
    for (const auto& a : p.value("agents", nlohmann::json::array())) {
      if (a.is_string()) agents.insert(a.get<std::string>());
    }
  }
  int64_t last = rounds.empty() ? 0 : rounds.rbegin()->first;
  const char* row = csv ? "%s,%s,%s,%s,%s,%s,%s,%s,%s" : "%5s %9s %10s %11s %7s %8s %9s %9s %8s";
  // With differential privacy, ε spent by the end of each round.
  const bool dp = r.contains("privacy") && r["privacy"].is_object();
  const char* eps_cell = csv ? ",%s" : " %8s";
  if (!csv) {
    std::printf("%s: %lld rounds of training on %zu devices\n", job.job_id().c_str(),
                static_cast<long long>(last), agents.size());
  }
  std::printf(row, "ROUND", "TEST_ACC", "TEST_LOSS", "TRAIN_LOSS", "AGENTS", "REFUSED", "UP_KB",
              "UPDATE_KB", "SECONDS");
  if (dp) std::printf(eps_cell, "EPSILON");
  std::printf("\n");
  for (int64_t n = 0; n <= last; ++n) {
    const nlohmann::json e = eval.count(n) ? eval[n] : nlohmann::json();
    const nlohmann::json t = rounds.count(n) ? rounds[n] : nlohmann::json();
    std::string who = t.is_object() ? std::to_string(t.value("agents", nlohmann::json::array()).size()) : "-";
    std::string refused = t.is_object() ? std::to_string(t.value("rejected", nlohmann::json::array()).size()) : "-";
    std::printf(row, std::to_string(n).c_str(), Cell(e, "accuracy", "%.4f").c_str(),
                Cell(e, "loss", "%.4f").c_str(), Cell(t, "train_loss", "%.4f").c_str(), who.c_str(),
                refused.c_str(), Cell(t, "bytes_up", "%.1f", 1e-3).c_str(),
                Cell(t, "update_bytes", "%.1f", 1e-3).c_str(), Cell(t, "seconds", "%.2f").c_str());
    if (dp) std::printf(eps_cell, Cell(t.is_object() ? t.value("privacy", nlohmann::json()) : t,
                                       "epsilon", "%.3f").c_str());
    std::printf("\n");
  }
  if (csv) return;
  if (dp) PrintPrivacySpent(r["privacy"]);
  // Secure aggregation: how each round's sum went.
  nlohmann::json secure;
  for (const auto& p : r.value("rounds", nlohmann::json::array())) {
    if (!p.is_object() || !p.contains("secure_aggregation")) continue;
    if (secure.is_null()) secure = p["secure_aggregation"];
    if (p.contains("abandoned") && p["abandoned"].is_string()) {
      std::printf("  round %lld abandoned, the model unchanged: %s\n",
                  static_cast<long long>(p.value("round", int64_t{0})),
                  OneLine(p["abandoned"].get<std::string>(), 200).c_str());
    }
  }
  if (!secure.is_null() && !dp) {
    std::printf("  secure aggregation on: the deltas stayed on the devices; the coordinator summed "
                "masked vectors (%s neighbours each, %s shares rebuild a secret, %s-bit ring)\n",
                Cell(secure, "neighbours", "%.0f").c_str(), Cell(secure, "threshold", "%.0f").c_str(),
                Cell(secure, "bits", "%.0f").c_str());
  }
  const nlohmann::json& b = r.value("bytes", nlohmann::json::object());
  std::printf("  bytes: %.1f KB of deltas up, %.1f KB of updates down (a device that holds the "
              "last model fetches only the update); the model is %.1f KB\n",
              b.value("up", 0.0) / 1e3, b.value("updates", 0.0) / 1e3, b.value("model", 0.0) / 1e3);
  std::string names;
  for (const auto& a : agents) names += (names.empty() ? "" : ", ") + a;
  std::printf("  devices: %s\n", OneLine(names, 400).c_str());
  for (const auto& p : r.value("rounds", nlohmann::json::array())) {
    for (const auto& x : p.value("rejected", nlohmann::json::array())) {
      std::printf("  round %lld refused %s's delta: %s\n",
                  static_cast<long long>(p.value("round", int64_t{0})),
                  OneLine(x.value("agent", "?")).c_str(), OneLine(x.value("why", ""), 160).c_str());
    }
  }
  const auto trials = r.value("trials", nlohmann::json::array());
  const bool script = !trials.empty() && trials[0].is_object() &&
                      trials[0].value("params", nlohmann::json::object()).contains("script");
  if (script) {  // a user's module: what trained is its trainable parameters
    std::printf("  its model: claw results %s --out DIR (model.safetensors, the module's trained "
                "parameters: examples/models/trained.py; infer --model-of %s)\n",
                job.job_id().c_str(), job.job_id().c_str());
  } else {
    std::printf("  its model: claw results %s --out DIR (model.pt, for infer --model-of %s; "
                "model.safetensors)\n",
                job.job_id().c_str(), job.job_id().c_str());
  }
}

void PrintKnownResult(const v1::JobInfo& job, const nlohmann::json& r, bool csv) {
  double wall_s = static_cast<double>(job.finished_unix_ms() - job.created_unix_ms()) / 1e3;
  std::string timing;
  if (job.finished_unix_ms() > 0 && wall_s > 0) {
    char buf[160];
    // Task time is the wall time of tasks summed: tasks sharing a core each
    // count in full, so the ratio is how many ran at once, not a speedup.
    std::snprintf(buf, sizeof buf, "  %u tasks, %.2f s of task time in %.2f s (%.2f at once on average)\n",
                  job.tasks_total(), job.task_seconds(), wall_s, job.task_seconds() / wall_s);
    timing = buf;
  }
  if (r.is_object() && r.contains("estimate")) {
    double est = r["estimate"], se = r["std_error"];
    std::printf("%s: %s over %llu paths\n", job.job_id().c_str(),
                OneLine(r.value("model", "")).c_str(),
                static_cast<unsigned long long>(r.value("paths", 0ULL)));
    std::printf("  estimate       %.6f  ± %.6f (95%% interval %.6f .. %.6f)\n", est, 1.96 * se,
                r["ci95"][0].get<double>(), r["ci95"][1].get<double>());
    if (r.contains("reference")) {
      double ref = r["reference"];
      std::printf("  %-14s %.6f  (difference %.2f standard errors)\n",
                  OneLine(r.value("reference_name", "reference")).c_str(), ref,
                  se > 0 ? (est - ref) / se : 0.0);
    }
    std::printf("%s", timing.c_str());
    return;
  }
  if (r.is_object() && r.contains("predictions") && r["predictions"].is_string()) {  // infer
    const std::string& p = r["predictions"].get_ref<const std::string&>();
    std::printf("%s: %zu predictions", job.job_id().c_str(), p.size());
    if (r.contains("accuracy")) std::printf(", accuracy %.4f", r["accuracy"].get<double>());
    std::printf(", %.0f images/s of task time\n  first: %s%s\n  (--json for all of them)\n%s",
                r.value("images_per_second", 0.0), OneLine(p.substr(0, 60)).c_str(),
                p.size() > 60 ? "..." : "", timing.c_str());
    return;
  }
  if (r.is_object() && r.contains("rows_per_second")) {  // infer with a script model
    std::printf("%s: %llu rows predicted", job.job_id().c_str(),
                static_cast<unsigned long long>(r.value("count", 0ULL)));
    if (r.contains("accuracy")) {
      std::printf(", accuracy %.4f, loss %.4f", r["accuracy"].get<double>(), r.value("loss", 0.0));
    }
    std::printf(", %.0f rows/s of task time\n", r.value("rows_per_second", 0.0));
    if (r.contains("predictions") && r["predictions"].is_array()) {
      std::string first;
      for (size_t i = 0; i < r["predictions"].size() && i < 30; ++i) {
        first += (i ? " " : "") + r["predictions"][i].dump();
      }
      std::printf("  classes: %s%s\n", OneLine(first).c_str(), r["predictions"].size() > 30 ? " ..." : "");
    }
    std::printf("  outputs: claw results %s --out DIR (predictions/shard-*.npy)\n%s",
                job.job_id().c_str(), timing.c_str());
    return;
  }
  if (r.is_object() && r.contains("curve") && r["curve"].is_array()) {  // fedtrain
    PrintTraining(job, r, csv);
    return;
  }
  if (r.is_object() && r.contains("trials") && r["trials"].is_array()) {
    if (!csv) std::printf("%s: %zu trials\n", job.job_id().c_str(), r["trials"].size());
    PrintTrials(r, csv);
    if (auto best = BestTrial(r); best && !csv) {
      std::string metric = r.value("metric", "test_accuracy");
      const nlohmann::json& b = r["best"];
      std::string value = b.is_object() && b.contains("metric") ? b["metric"].dump() : "?";
      std::printf("best: trial %zu %s = %s; its model: claw results %s --best --out DIR\n%s",
                  *best, OneLine(metric).c_str(), OneLine(value).c_str(), job.job_id().c_str(),
                  timing.c_str());
    } else if (!csv) {
      std::printf("%s", timing.c_str());
    }
    return;
  }
  if (r.is_object() && r.contains("tasks") && r["tasks"].is_array()) {  // exec: one line a task
    std::printf("%s: %zu tasks\n", job.job_id().c_str(), r["tasks"].size());
    for (const auto& t : r["tasks"]) {
      std::string vars, out = t.value("stdout", "");
      const nlohmann::json values = t.value("vars", nlohmann::json::object());
      for (const auto& [k, v] : values.items()) {
        vars += (vars.empty() ? "" : " ") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
      }
      std::printf("  %-24s %s\n", vars.empty() ? "-" : OneLine(vars).c_str(),
                  OneLine(out, 100).c_str());
    }
    std::printf("  (--json for the whole output)\n%s", timing.c_str());
    return;
  }
  std::printf("%s\n%s", TerminalBlock(r.dump(2)).c_str(), timing.c_str());
}

}  // namespace

void PrintResult(const v1::JobInfo& job, const std::string& result_json, bool json, bool csv) {
  auto r = nlohmann::json::parse(result_json, nullptr, false);
  if (json) {
    std::printf("%s\n",
                nlohmann::json{{"job", JobInfoToJson(job)}, {"result", r}}.dump(2).c_str());
    return;
  }
  try {
    if (csv && !(r.is_object() && r.contains("trials"))) {
      std::printf("(only train and sweep results have a CSV form; as JSON:)\n%s\n",
                  TerminalBlock(r.dump(2)).c_str());
      return;
    }
    PrintKnownResult(job, r, csv);
  } catch (const nlohmann::json::exception& e) {
    std::fflush(stdout);
    std::printf("\n(this result is not in a shape the printer knows (%s); as JSON:)\n%s\n",
                e.what(), TerminalBlock(r.dump(2)).c_str());
  }
}

int WaitAndPrint(Client& client, const std::string& job_id, bool json) {
  auto last = client.Watch(job_id, [json](const v1::JobInfo& i) {
    if (!json) DrawProgress(i);
  });
  if (!last.ok()) {
    std::fprintf(stderr, "error: %s\n", TerminalBlock(last.status().ToString()).c_str());
    return 3;
  }
  if (last->state() != "done") {
    std::fprintf(stderr, "job %s %s%s\n", job_id.c_str(), last->state().c_str(),
                 last->error().empty() ? "" : (": " + TerminalBlock(last->error(), "  ")).c_str());
    return 4;
  }
  auto r = client.Results(job_id);
  if (!r.ok()) {
    std::fprintf(stderr, "error: %s\n", TerminalBlock(r.status().ToString()).c_str());
    return 3;
  }
  PrintResult(r->job(), r->result_json(), json);
  return 0;
}

Result<size_t> DownloadOutputs(const Client& client, const std::string& result_json,
                               const std::string& dir, bool best_only) {
  namespace fs = std::filesystem;
  struct File {
    size_t task;
    std::string path, sha256;
    uint64_t size;
  };
  std::vector<File> files;
  auto result = nlohmann::json::parse(result_json, nullptr, false);
  // exec lists its tasks, train and sweep their trials.
  const char* list = result.is_object() && result.contains("trials") ? "trials" : "tasks";
  if (result.is_object() && result.contains(list) && result[list].is_array()) {
    std::optional<size_t> best;
    if (best_only) {
      best = BestTrial(result);
      if (!best) return NotFound("the job's result names no best trial");
    }
    for (size_t i = 0; i < result[list].size(); ++i) {
      if (best && i != *best) continue;
      const auto& t = result[list][i];
      if (!t.is_object() || !t.contains("files") || !t["files"].is_array()) continue;
      for (const auto& f : t["files"]) {
        files.push_back(File{i, f.value("path", ""), f.value("sha256", ""),
                             f.value("size", uint64_t{0})});
      }
    }
  }
  if (files.empty()) return NotFound("the job's result lists no output files");
  // The paths come from agents: each must stay inside `dir`.
  std::map<std::string, size_t> uses;
  for (const File& f : files) {
    fs::path p(f.path);
    bool inside = !f.path.empty() && p.is_relative() &&
                  std::none_of(p.begin(), p.end(), [](const fs::path& c) { return c == ".."; });
    if (!inside || !IsBlobHash(f.sha256)) {
      return InvalidArgument("task " + std::to_string(f.task) + " lists a bad output file '" +
                             f.path.substr(0, 200) + "'; refused");
    }
    uses[f.path]++;
  }
  BlobClient blobs = client.Blobs();
  uint64_t bytes = 0;
  for (const File& f : files) {
    fs::path dest = fs::path(dir);
    if (uses[f.path] > 1) dest /= "task-" + std::to_string(f.task);
    dest /= f.path;
    std::error_code ec;
    fs::create_directories(dest.parent_path(), ec);
    if (ec) return Unavailable("cannot create " + dest.parent_path().string() + ": " + ec.message());
    CLAW_RETURN_IF_ERROR(blobs.Download(f.sha256, dest.string()));
    std::printf("%s  %s\n", f.sha256.c_str(), OneLine(dest.string()).c_str());
    bytes += f.size;
  }
  const bool small = bytes < 1'000'000;
  std::fprintf(stderr, "%zu files, %.1f %s, checked against their SHA-256, in %s\n", files.size(),
               static_cast<double>(bytes) / (small ? 1e3 : 1e6), small ? "KB" : "MB", dir.c_str());
  return files.size();
}

void PrintPrivacyPlan(const std::string& spec_json) {
  nlohmann::json spec = nlohmann::json::parse(spec_json, nullptr, false);
  if (!spec.is_object() || spec.value("app", "") != "fedtrain") return;
  auto t = rounds::ParseTrainingSpec(spec.value("params", nlohmann::json::object()));
  if (!t.ok() || !t->privacy.on) return;
  rounds::PrivacyPlan plan = rounds::PlanPrivacy(t->privacy, t->SampleRate(), t->rounds);
  std::fprintf(stderr,
               "privacy: each round spends up to ε = %.3g at δ = %g (%s); all %u rounds: ε = %.3g",
               plan.first_round_epsilon, t->privacy.delta,
               (t->PerDevicePrivacy() ? std::string("per device, counting the rounds it takes part in")
                                      : "each shard in a round with probability " +
                                            std::to_string(t->SampleRate()).substr(0, 6))
                   .c_str(),
               t->rounds, plan.all_rounds_epsilon);
  if (t->privacy.budget > 0) {
    std::fprintf(stderr, "; the budget ε = %g allows %u of them", t->privacy.budget,
                 plan.rounds_in_budget);
  }
  std::fprintf(stderr, "\n");
}

}  // namespace claw

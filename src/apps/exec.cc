#include "apps/exec.h"

#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <map>
#include <filesystem>

#include "apps/blob_fields.h"
#include "sandbox/sandbox.h"
#include "sandbox/scratch.h"
#include "common/blobs.h"
#include "common/crypto.h"
#include "common/text.h"
#include "core/job_spec.h"
#include "core/json_fields.h"

namespace claw {
namespace {

using nlohmann::json;

// The values of one sweep variable.
Result<std::vector<json>> Values(const std::string& name, const json& v) {
  std::string field = "params.sweep." + name;
  std::vector<json> out;
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    size_t dots = s.find("..");
    long long a = 0, b = 0;
    size_t used_a = 0, used_b = 0;
    try {
      if (dots == std::string::npos) throw std::invalid_argument("no ..");
      a = std::stoll(s.substr(0, dots), &used_a);
      b = std::stoll(s.substr(dots + 2), &used_b);
    } catch (const std::exception&) {
      return InvalidArgument(field + ": '" + s + "' is not a range like \"1..240\"");
    }
    if (used_a != dots || used_b != s.size() - dots - 2 || b < a) {
      return InvalidArgument(field + ": '" + s + "' is not a range like \"1..240\"");
    }
    if (b - a >= static_cast<long long>(kMaxTasksPerJob)) {
      return InvalidArgument(field + ": the range has more than " +
                             std::to_string(kMaxTasksPerJob) + " values");
    }
    for (long long i = a; i <= b; ++i) out.push_back(i);
  } else if (v.is_array() && !v.empty()) {
    for (const auto& x : v) {
      if (!x.is_number() && !x.is_string()) {
        return InvalidArgument(field + ": values must be numbers or strings");
      }
      out.push_back(x);
    }
  } else {
    return InvalidArgument(field + ": must be a range \"A..B\" or a non-empty list");
  }
  return out;
}

std::string Text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// "{name}" in `arg` replaced by the task's values.
std::string Substitute(std::string arg, const json& vars) {
  for (const auto& [name, value] : vars.items()) {
    std::string key = "{" + name + "}", text = Text(value);
    for (size_t at = arg.find(key); at != std::string::npos; at = arg.find(key, at + text.size())) {
      arg.replace(at, key.size(), text);
    }
  }
  return arg;
}

std::string Tail(const std::string& s, size_t n) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

// The end of a command's stderr for an error message: valid UTF-8 with
// control characters escaped but for newlines and tabs (a command's bytes
// are arbitrary; an error travels as a protobuf string and is printed).
std::string StderrTail(const std::string& s, size_t n) {
  return EscapeControl(Tail(s, n), TextLayout::kMultiLine);
}

// Ok when `path` can only name a place inside the scratch directory:
// relative, with no "..", "." or empty components.
Status CheckInsideScratch(const std::string& field, const std::string& path) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument(field + ": '" + path.substr(0, 200) + "' " + why);
  };
  if (path.empty() || path.size() > ExecApp::kMaxPathBytes) {
    return bad("must be 1 to " + std::to_string(ExecApp::kMaxPathBytes) + " bytes");
  }
  if (path.front() == '/') return bad("is absolute; paths are relative to the scratch directory");
  if (path.find('\0') != std::string::npos) return bad("contains a NUL byte");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = std::min(path.find('/', start), path.size());
    std::string part = path.substr(start, end - start);
    if (part == "..") return bad("escapes the scratch directory");
    if (part.empty() || part == ".") return bad("has an empty or '.' component");
    start = end + 1;
  }
  return Status::Ok();
}

// params.inputs, checked: {"relative/path": "<sha256>"}.
Result<json> ReadInputs(const json& params) {
  if (!params.contains("inputs")) return json::object();
  const json& in = params["inputs"];
  if (!in.is_object() || in.size() > ExecApp::kMaxInputs) {
    return InvalidArgument("params.inputs: must be an object of at most " +
                           std::to_string(ExecApp::kMaxInputs) +
                           " {\"relative/path\": \"<sha256 of an uploaded blob>\"}");
  }
  for (const auto& [path, hash] : in.items()) {
    CLAW_RETURN_IF_ERROR(CheckInsideScratch("params.inputs", path));
    if (!hash.is_string() || !IsBlobHash(hash.get_ref<const std::string&>())) {
      return InvalidArgument("params.inputs." + path.substr(0, 200) +
                             ": must be a blob's SHA-256 (64 lowercase hex digits)");
    }
  }
  return in;
}

// params.outputs, checked: ["glob", ...].
Result<json> ReadOutputs(const json& params) {
  if (!params.contains("outputs")) return json::array();
  const json& out = params["outputs"];
  if (!out.is_array() || out.size() > ExecApp::kMaxOutputPatterns) {
    return InvalidArgument("params.outputs: must be a list of at most " +
                           std::to_string(ExecApp::kMaxOutputPatterns) +
                           " glob patterns, e.g. [\"*.png\"]");
  }
  for (const auto& pattern : out) {
    if (!pattern.is_string()) return InvalidArgument("params.outputs: patterns must be strings");
    CLAW_RETURN_IF_ERROR(CheckInsideScratch("params.outputs", pattern.get<std::string>()));
  }
  return out;
}

// Places the task's input blobs in the scratch directory (hash-checked on
// the way out of the cache).
Status StageInputs(const json& inputs, const RunContext& ctx, const std::filesystem::path& scratch) {
  if (inputs.empty()) return Status::Ok();
  if (!ctx.blobs) return FailedPrecondition("exec task: this worker has no blob cache for inputs");
  for (const auto& [path, hash] : inputs.items()) {
    CLAW_RETURN_IF_ERROR(CheckInsideScratch("input", path));
    std::filesystem::path dest = scratch / path;
    std::error_code ec;
    std::filesystem::create_directories(dest.parent_path(), ec);
    if (ec) return Unavailable("input " + path + ": " + ec.message());
    Status st = ctx.blobs->Export(hash.get<std::string>(), dest.string());
    if (!st.ok()) return Status(st.code(), "input " + path + ": " + st.message());
  }
  return Status::Ok();
}

// The files in `scratch` that the patterns match, moved into the blob cache:
// [{"path", "sha256", "size"}] sorted by path.
Result<json> CollectOutputs(const json& patterns, const RunContext& ctx,
                            const std::filesystem::path& scratch, uint64_t max_file_bytes) {
  json files = json::array();
  if (patterns.empty()) return files;
  if (!ctx.blobs) return FailedPrecondition("exec task: this worker has no blob cache for outputs");
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, fs::file_type>> found;  // relative path, type
  std::error_code ec;
  // Symbolic links to directories are not descended into.
  for (auto it = fs::recursive_directory_iterator(scratch, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    fs::file_type type = it->symlink_status(ec).type();
    if (type == fs::file_type::directory) continue;
    found.emplace_back(it->path().lexically_relative(scratch).string(), type);  // no link resolved
  }
  std::sort(found.begin(), found.end());
  std::vector<bool> matched(patterns.size(), false);
  for (const auto& [rel, type] : found) {
    bool wanted = false;
    for (size_t i = 0; i < patterns.size(); ++i) {
      if (fnmatch(patterns[i].get_ref<const std::string&>().c_str(), rel.c_str(),
                  FNM_PATHNAME | FNM_PERIOD) == 0) {
        matched[i] = wanted = true;
      }
    }
    if (!wanted) continue;
    if (type != fs::file_type::regular) {
      return InvalidArgument("output " + rel + " is not a regular file (a link or device); refused");
    }
    if (files.size() >= ExecApp::kMaxOutputFiles) {
      return ResourceExhausted("more than " + std::to_string(ExecApp::kMaxOutputFiles) +
                               " output files");
    }
    auto hash = ctx.blobs->Import((scratch / rel).string(), max_file_bytes);
    if (!hash.ok()) return Status(hash.status().code(), "output " + rel + ": " + hash.status().message());
    auto size = ctx.blobs->Size(*hash);
    files.push_back({{"path", rel}, {"sha256", *hash}, {"size", size.ok() ? *size : 0}});
  }
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (!matched[i]) {
      return NotFound("output pattern '" + patterns[i].get<std::string>() + "' matched no file");
    }
  }
  return files;
}

// What replicas are compared on (params.compare), in this order.
constexpr const char* kCompareParts[] = {"exit", "stdout", "stderr", "files"};

// params.compare, checked: a list of distinct parts (null: all of them).
Result<json> ReadCompare(const json& params) {
  if (!params.contains("compare")) return json();
  const json& c = params["compare"];
  std::string known = "\"exit\", \"stdout\", \"stderr\", \"files\"";
  if (!c.is_array() || c.empty()) {
    return InvalidArgument("params.compare: must be a list of some of " + known);
  }
  std::set<std::string> seen;
  for (const json& part : c) {
    bool ok = part.is_string() && std::any_of(std::begin(kCompareParts), std::end(kCompareParts),
                                              [&](const char* k) { return part == k; });
    if (!ok) return InvalidArgument("params.compare: " + part.dump() + " is not one of " + known);
    if (!seen.insert(part.get<std::string>()).second) {
      return InvalidArgument("params.compare: " + part.dump() + " is named twice");
    }
  }
  return seen.size() == std::size(kCompareParts) ? json() : c;
}

// The files of an exec output by path: {"a.png": "<sha256>", ...}.
std::map<std::string, std::string> FilesOf(const json& out) {
  std::map<std::string, std::string> files;
  if (!out.contains("files") || !out["files"].is_array()) return files;
  for (const json& f : out["files"]) {
    if (f.is_object()) files[f.value("path", "")] = f.value("sha256", "");
  }
  return files;
}

// The first part of two outputs that differs among those `params` compare;
// empty when none does.
std::string FirstDifference(std::string_view params, std::string_view a, std::string_view b) {
  json x = json::parse(a, nullptr, false), y = json::parse(b, nullptr, false);
  if (!x.is_object() || !y.is_object()) return "the output (not an exec task's)";
  json p = json::parse(params, nullptr, false);
  std::vector<std::string> parts(std::begin(kCompareParts), std::end(kCompareParts));
  if (p.is_object() && p.contains("compare") && p["compare"].is_array()) {
    parts.clear();
    for (const json& part : p["compare"]) {
      if (part.is_string()) parts.push_back(part.get<std::string>());
    }
  }
  if (x.value("vars", json()) != y.value("vars", json())) return "the swept values";
  for (const std::string& part : parts) {
    if (part == "files") {
      auto fx = FilesOf(x), fy = FilesOf(y);
      for (const auto& [path, hash] : fx) {
        auto it = fy.find(path);
        if (it == fy.end()) return "the files made (" + path + " by one only)";
        if (it->second != hash) return "the file " + path;
      }
      for (const auto& [path, hash] : fy) {
        if (!fx.count(path)) return "the files made (" + path + " by one only)";
      }
      continue;
    }
    if (x.value(part, json()) != y.value(part, json())) {
      if (part == "exit") return "the exit code";
      return part;
    }
    if ((part == "stdout" || part == "stderr") &&
        x.value("truncated", false) != y.value("truncated", false)) {
      return part + " (cut short in one)";
    }
  }
  return "";
}

}  // namespace

bool ExecApp::Equivalent(std::string_view params, std::string_view a, std::string_view b) const {
  return a == b || FirstDifference(params, a, b).empty();
}

std::string ExecApp::Difference(std::string_view params, std::string_view a,
                                std::string_view b) const {
  std::string d = FirstDifference(params, a, b);
  return d.empty() ? "nothing compared" : d;
}

Result<std::vector<TaskSpec>> ExecApp::Plan(const JobSpec& spec) const {
  FieldReader f(spec.params, "params");
  CLAW_RETURN_IF_ERROR(f.NoUnknownFields(
      {"command", "sweep", "timeout_s", "memory_mb", "output_kb", "inputs", "outputs", "file_mb",
       "disk_mb", "processes", "compare"}));
  const json* command = spec.params.contains("command") ? &spec.params["command"] : nullptr;
  if (!command || !command->is_array() || command->empty() || command->size() > kMaxArgs) {
    return InvalidArgument("params.command: must be a list of 1 to " + std::to_string(kMaxArgs) +
                           " strings, e.g. [\"sha256sum\", \"{file}\"]");
  }
  for (const auto& a : *command) {
    if (!a.is_string() || a.get_ref<const std::string&>().size() > kMaxArgBytes) {
      return InvalidArgument("params.command: every argument must be a string of at most " +
                             std::to_string(kMaxArgBytes) + " bytes");
    }
  }
  auto timeout = f.Integer("timeout_s", 1, 86'400, 600);
  auto memory = f.Integer("memory_mb", 16, 1 << 20, 2048);
  auto output = f.Integer("output_kb", 1, 1024, 64);
  auto file_mb = f.Integer("file_mb", 1, 1 << 20, 1024);
  auto disk_mb = f.Integer("disk_mb", 1, 1 << 20, 4096);
  auto processes = f.Integer("processes", 1, 4096, 256);
  for (const Status* st : {&timeout.status(), &memory.status(), &output.status(), &file_mb.status(),
                           &disk_mb.status(), &processes.status()}) {
    if (!st->ok()) return *st;
  }
  auto inputs = ReadInputs(spec.params);
  if (!inputs.ok()) return inputs.status();
  auto outputs = ReadOutputs(spec.params);
  if (!outputs.ok()) return outputs.status();
  auto compare = ReadCompare(spec.params);
  if (!compare.ok()) return compare.status();
  // The grid of the sweep's values, in a fixed order (by name, then value).
  std::vector<json> grid = {json::object()};
  if (spec.params.contains("sweep")) {
    const json& sweep = spec.params["sweep"];
    if (!sweep.is_object()) return InvalidArgument("params.sweep: must be an object");
    for (const auto& [name, v] : sweep.items()) {
      auto values = Values(name, v);
      if (!values.ok()) return values.status();
      if (grid.size() * values->size() > kMaxTasksPerJob) {
        return InvalidArgument("params.sweep: the grid has more than " +
                               std::to_string(kMaxTasksPerJob) + " tasks");
      }
      std::vector<json> next;
      next.reserve(grid.size() * values->size());
      for (const json& partial : grid) {
        for (const json& value : *values) {
          json t = partial;
          t[name] = value;
          next.push_back(std::move(t));
        }
      }
      grid = std::move(next);
    }
  }
  // A task's lease never outlives the job's task_timeout_s: a longer
  // timeout could not be honoured.
  const auto task_timeout_s = std::chrono::duration_cast<std::chrono::seconds>(spec.task_timeout);
  if (*timeout + 60 > task_timeout_s.count()) {
    return InvalidArgument("params.timeout_s: " + std::to_string(*timeout) +
                           " s (and a minute to move files) is longer than the job's "
                           "task_timeout_s (" + std::to_string(task_timeout_s.count()) +
                           " s); raise task_timeout_s");
  }
  if (spec.tasks != 0 && spec.tasks != grid.size()) {
    return InvalidArgument("spec.tasks: the sweep makes " + std::to_string(grid.size()) +
                           " tasks; leave tasks out or set it to that");
  }
  std::vector<TaskSpec> out;
  out.reserve(grid.size());
  for (const json& vars : grid) {
    json argv = json::array();
    for (const auto& a : *command) argv.push_back(Substitute(a.get<std::string>(), vars));
    json params = {{"argv", argv},          {"vars", vars},          {"timeout_s", *timeout},
                   {"memory_mb", *memory}, {"output_kb", *output}, {"file_mb", *file_mb},
                   {"disk_mb", *disk_mb},  {"processes", *processes}};
    if (!inputs->empty()) params["inputs"] = *inputs;
    if (!outputs->empty()) params["outputs"] = *outputs;
    if (!compare->is_null()) params["compare"] = *compare;
    // Cost: unknown; assume a second of a 1 GFLOP/s core so leases are sane.
    out.push_back(TaskSpec{params.dump(), 1e9});
  }
  return out;
}

double ExecApp::TaskSeconds(std::string_view task_params) const {
  json p = json::parse(task_params, nullptr, false);
  if (!p.is_object() || !p.contains("timeout_s") || !p["timeout_s"].is_number()) return 0;
  // Its inputs are staged and its outputs collected besides.
  return p["timeout_s"].get<double>() + 60;
}

Result<std::string> ExecApp::Run(std::string_view task_params, const RunContext& ctx) const {
  Status sandbox = SandboxAvailable();
  if (!sandbox.ok()) {
    return FailedPrecondition("exec tasks are refused on this agent: " + sandbox.message());
  }
  json p = json::parse(task_params, nullptr, false);
  if (!p.is_object() || !p.contains("argv") || !p["argv"].is_array()) {
    return InvalidArgument("exec task: malformed parameters");
  }
  std::vector<std::string> argv;
  for (const auto& a : p["argv"]) {
    if (!a.is_string()) return InvalidArgument("exec task: argv must be strings");
    argv.push_back(a.get<std::string>());
  }
  // The job's limits, each capped by the contributor's (RunContext::caps)
  // and by what the job could ask for at submission.
  auto number = [&](const char* key, uint64_t fallback, uint64_t most) {
    const json& v = p.contains(key) ? p[key] : json();
    return std::min<uint64_t>(v.is_number_unsigned() ? v.get<uint64_t>() : fallback, most);
  };
  auto capped = [](uint64_t asked, uint64_t cap) { return cap == 0 ? asked : std::min(asked, cap); };
  SandboxLimits limits;
  const uint64_t timeout_s = std::max<uint64_t>(number("timeout_s", 600, 86'400), 1);
  limits.wall_time = std::chrono::seconds(timeout_s);
  limits.cpu_seconds = capped(timeout_s, ctx.caps.cpu_seconds);
  limits.memory_bytes = capped(std::max<uint64_t>(number("memory_mb", 2048, 1 << 20), 16) << 20,
                               ctx.caps.memory_bytes);
  limits.output_bytes = number("output_kb", 64, 1024) << 10;
  limits.disk_bytes = capped(std::max<uint64_t>(number("disk_mb", 4096, 1 << 20), 1) << 20,
                             ctx.caps.disk_bytes);
  limits.file_bytes = std::min(std::max<uint64_t>(number("file_mb", 1024, 1 << 20), 1) << 20,
                               limits.disk_bytes);
  limits.processes = std::max<uint64_t>(number("processes", 256, 4096), 1);
  limits.uid = ctx.sandbox_uid;
  // Checked again here: the agent does not take the coordinator's word.
  auto inputs = ReadInputs(p);
  if (!inputs.ok()) return inputs.status();
  auto outputs = ReadOutputs(p);
  if (!outputs.ok()) return outputs.status();
  // A fresh scratch directory per task, removed afterwards (and, should
  // the worker be killed first, by the next worker of its slot).
  std::filesystem::path scratch =
      (ctx.scratch_dir.empty() ? std::filesystem::temp_directory_path()
                               : std::filesystem::path(ctx.scratch_dir)) /
      ("claw-task-" + RandomHex(8));
  std::error_code ec;
  std::filesystem::create_directories(scratch, ec);
  if (ec) return Unavailable("cannot create a scratch directory: " + ec.message());
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() { RemoveTree(dir.string()); }
  } cleanup{scratch};
  CLAW_RETURN_IF_ERROR(StageInputs(*inputs, ctx, scratch));
  auto r = RunSandboxed(argv, scratch.string(), limits, ctx.group);
  if (!r.ok()) return r.status();
  if (r->timed_out) {
    return ResourceExhausted("timed out after " + std::to_string(limits.wall_time.count()) + " s");
  }
  if (!r->killed_for.empty()) {
    return ResourceExhausted("stopped: " + r->killed_for + "; stderr: " + StderrTail(r->stderr_text, 256));
  }
  if (r->exit_code != 0) {
    std::string how = r->exit_code > 128 ? "killed by signal " + std::to_string(r->exit_code - 128)
                                         : "exit code " + std::to_string(r->exit_code);
    return InvalidArgument(EscapeControl(argv[0]) + ": " + how + "; stderr: " +
                           StderrTail(r->stderr_text, 512));
  }
  auto files = CollectOutputs(*outputs, ctx, scratch, limits.file_bytes);
  if (!files.ok()) return files.status();
  json out = {{"vars", p["vars"]},
              {"exit", r->exit_code},
              {"stdout", r->stdout_text},
              {"stderr", r->stderr_text},
              {"truncated", r->truncated}};
  if (!files->empty()) out["files"] = std::move(files).value();
  // Not valid UTF-8 (binary output): replaced, so the result stays JSON.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<json> ExecApp::Merge(const JobSpec&, const std::vector<std::string_view>& outputs) const {
  json tasks = json::array();
  for (std::string_view o : outputs) {
    json t = json::parse(o, nullptr, false);
    if (t.is_discarded()) return InvalidArgument("an exec task's output is not JSON");
    tasks.push_back(std::move(t));
  }
  return json{{"tasks", std::move(tasks)}};
}

Status ExecApp::Runnable() const { return SandboxAvailable(); }

std::vector<std::string> ExecApp::SpecInputBlobs(const JobSpec& spec) const {
  return spec.params.is_object() && spec.params.contains("inputs") ? BlobHashesIn(spec.params["inputs"])
                                                                   : std::vector<std::string>{};
}

std::vector<std::string> ExecApp::TaskInputBlobs(std::string_view task_params) const {
  json p = json::parse(task_params, nullptr, false);
  return p.is_object() && p.contains("inputs") ? BlobHashesIn(p["inputs"]) : std::vector<std::string>{};
}

std::vector<std::string> ExecApp::OutputBlobs(std::string_view task_output) const {
  return OutputFileBlobs(task_output);
}

}  // namespace claw

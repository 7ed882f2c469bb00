#include "apps/exec.h"

#include <unistd.h>

#include <filesystem>

#include "apps/sandbox.h"
#include "common/crypto.h"
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

}  // namespace

Result<std::vector<TaskSpec>> ExecApp::Plan(const JobSpec& spec) const {
  FieldReader f(spec.params, "params");
  CLAW_RETURN_IF_ERROR(f.NoUnknownFields({"command", "sweep", "timeout_s", "memory_mb", "output_kb"}));
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
  for (const Status* st : {&timeout.status(), &memory.status(), &output.status()}) {
    if (!st->ok()) return *st;
  }
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
                   {"memory_mb", *memory}, {"output_kb", *output}};
    // Cost: unknown; assume a second of a 1 GFLOP/s core so leases are sane.
    out.push_back(TaskSpec{params.dump(), 1e9});
  }
  return out;
}

Result<std::string> ExecApp::Run(std::string_view task_params) const {
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
  SandboxLimits limits;
  limits.wall_time = std::chrono::seconds(p.value("timeout_s", 600));
  limits.cpu_seconds = p.value("timeout_s", 600);
  limits.memory_bytes = p.value("memory_mb", uint64_t{2048}) << 20;
  limits.output_bytes = p.value("output_kb", size_t{64}) << 10;
  // A fresh scratch directory per task, removed afterwards.
  std::filesystem::path scratch =
      std::filesystem::temp_directory_path() / ("claw-task-" + RandomHex(8));
  std::error_code ec;
  std::filesystem::create_directories(scratch, ec);
  if (ec) return Unavailable("cannot create a scratch directory: " + ec.message());
  auto r = RunSandboxed(argv, scratch.string(), limits);
  std::filesystem::remove_all(scratch, ec);
  if (!r.ok()) return r.status();
  if (r->timed_out) {
    return ResourceExhausted("timed out after " + std::to_string(limits.wall_time.count()) + " s");
  }
  if (r->exit_code != 0) {
    std::string how = r->exit_code > 128 ? "killed by signal " + std::to_string(r->exit_code - 128)
                                         : "exit code " + std::to_string(r->exit_code);
    return InvalidArgument(argv[0] + ": " + how + "; stderr: " + Tail(r->stderr_text, 512));
  }
  json out = {{"vars", p["vars"]},
              {"exit", r->exit_code},
              {"stdout", r->stdout_text},
              {"stderr", r->stderr_text},
              {"truncated", r->truncated}};
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

}  // namespace claw

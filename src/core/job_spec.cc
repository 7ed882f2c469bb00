#include "core/job_spec.h"

#include "core/json_fields.h"

namespace claw {

Result<JobSpec> ParseJobSpec(std::string_view json_text, const AppRegistry& apps) {
  if (json_text.size() > kMaxSpecBytes) {
    return ResourceExhausted("spec: " + std::to_string(json_text.size()) +
                             " bytes is larger than the limit of " + std::to_string(kMaxSpecBytes));
  }
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return DescribeJsonError(json_text, "spec");
  if (!j.is_object()) return InvalidArgument("spec: must be a JSON object");

  FieldReader f(j, "spec");
  CLAW_RETURN_IF_ERROR(f.NoUnknownFields(
      {"app", "name", "params", "tasks", "seed", "priority", "max_attempts", "task_timeout_s",
       "replication", "quorum", "max_replicas", "quorum_wait_s", "adaptive", "spot_check",
       "close_done", "close_after_s", "close_min"}));
  JobSpec spec;
  auto app = f.String("app", 64, std::nullopt);
  if (!app.ok()) return app.status();
  if (!apps.Find(*app)) {
    std::string known;
    for (const auto& n : apps.Names()) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgument("spec.app: unknown app '" + *app + "' (known: " + known + ")");
  }
  spec.app = *app;
  App::Redundancy redundancy = apps.Find(*app)->DefaultRedundancy();
  auto name = f.String("name", 128, "");
  // Absent: the app decides how many (0). Given: at least one.
  auto tasks = f.Integer("tasks", 1, kMaxTasksPerJob, 0);
  auto seed = f.Unsigned("seed", 1);
  auto priority = f.Integer("priority", -100, 100, 0);
  auto attempts = f.Integer("max_attempts", 1, 20, 3);
  auto timeout = f.Integer("task_timeout_s", 1, 7 * 24 * 3600, 3600);
  auto replication = f.Integer("replication", 1, kMaxReplicas, redundancy.replication);
  for (const Status* st : {&name.status(), &tasks.status(), &seed.status(), &priority.status(),
                           &attempts.status(), &timeout.status(), &replication.status()}) {
    if (!st->ok()) return *st;
  }
  // A quorum above the replication could never be reached; the default
  // quorum follows a replication given without one.
  int64_t default_quorum =
      j.contains("replication") ? *replication / 2 + 1 : std::min<int64_t>(*replication,
                                                                            redundancy.quorum);
  auto quorum = f.Integer("quorum", 1, *replication, default_quorum);
  if (!quorum.ok()) return quorum.status();
  // Room for several tie-breakers: with one agent in five lying, 2/2 then
  // fails a task about once in 10,000 before the liars are on probation.
  int64_t default_max = std::min<int64_t>(kMaxReplicas, *replication > 1 ? 4 * *replication : 1);
  auto max_replicas = f.Integer("max_replicas", *replication, kMaxReplicas, default_max);
  if (!max_replicas.ok()) return max_replicas.status();
  auto quorum_wait = f.Integer("quorum_wait_s", 1, 7 * 24 * 3600, 600);
  if (!quorum_wait.ok()) return quorum_wait.status();
  spec.quorum_wait = std::chrono::seconds(*quorum_wait);
  spec.replication = static_cast<uint32_t>(*replication);
  spec.quorum = static_cast<uint32_t>(*quorum);
  spec.max_replicas = static_cast<uint32_t>(*max_replicas);
  if (auto it = j.find("adaptive"); it != j.end()) {
    if (!it->is_boolean()) return InvalidArgument("spec.adaptive: must be true or false");
    spec.adaptive = it->get<bool>();
  }
  auto spot_check = f.Number("spot_check", 0.001, 1, 0.05);
  if (!spot_check.ok()) return spot_check.status();
  spec.spot_check = *spot_check;
  auto close_done = f.Integer("close_done", 1, kMaxTasksPerJob, 0);
  auto close_after = f.Integer("close_after_s", 1, 7 * 24 * 3600, 0);
  auto close_min = f.Integer("close_min", 1, kMaxTasksPerJob, 1);
  for (const Status* st : {&close_done.status(), &close_after.status(), &close_min.status()}) {
    if (!st->ok()) return *st;
  }
  spec.close_done = static_cast<uint32_t>(*close_done);
  spec.close_after = std::chrono::seconds(*close_after);
  spec.close_min = static_cast<uint32_t>(*close_min);
  if (spec.ClosesEarly() && !apps.Find(*app)->ClosesEarly()) {
    return InvalidArgument(std::string("spec.") + (*close_done ? "close_done" : "close_after_s") +
                           ": a " + *app + " job ends only when every task is done");
  }
  if (j.contains("close_min") && spec.close_after.count() == 0) {
    return InvalidArgument("spec.close_min: only with close_after_s (how many must be done "
                           "when the time is up)");
  }
  if (spec.close_done > 0 && spec.close_min > spec.close_done) {
    return InvalidArgument("spec.close_min: more than close_done");
  }
  spec.name = *name;
  spec.tasks = static_cast<uint32_t>(*tasks);
  spec.seed = *seed;
  spec.priority = static_cast<int32_t>(*priority);
  spec.max_attempts = static_cast<uint32_t>(*attempts);
  spec.task_timeout = std::chrono::seconds(*timeout);
  if (auto it = j.find("params"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return InvalidArgument("spec.params: must be a JSON object");
    spec.params = *it;
  }
  return spec;
}

Result<PlannedJob> ParseAndPlanJob(std::string_view json_text, const AppRegistry& apps) {
  auto spec = ParseJobSpec(json_text, apps);
  if (!spec.ok()) return spec.status();
  auto tasks = apps.Find(spec->app)->Plan(*spec);
  if (!tasks.ok()) return tasks.status();
  const App& app = *apps.Find(spec->app);
  if (tasks->empty() && !app.Driven()) return InvalidArgument("spec: the job plans no tasks");
  if (tasks->size() > kMaxTasksPerJob) {
    return InvalidArgument("spec.tasks: " + std::to_string(tasks->size()) +
                           " tasks is more than the limit of " + std::to_string(kMaxTasksPerJob));
  }
  spec->tasks = static_cast<uint32_t>(tasks->size());
  for (auto [field, n] : {std::pair{"close_done", spec->close_done}, {"close_min", spec->close_min}}) {
    if (spec->ClosesEarly() && n > spec->tasks) {
      return InvalidArgument(std::string("spec.") + field + ": " + std::to_string(n) +
                             " is more than the job's " + std::to_string(spec->tasks) + " tasks");
    }
  }
  return PlannedJob{std::move(spec).value(), std::move(tasks).value()};
}

}  // namespace claw

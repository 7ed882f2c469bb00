// Jobs that close early (JobSpec::close_done, close_after: an
// over-provisioned round of training) and jobs that a driver ends
// (App::Driven).
#include <gtest/gtest.h>

#include "common/clock.h"
#include "core/job_spec.h"
#include "core/scheduler.h"
#include "store/store.h"

namespace claw {
namespace {

using std::chrono::seconds;

// Outputs are the params; Merge lists them, empty for tasks left out.
class PartialApp final : public App {
 public:
  std::string_view Name() const override { return "partial"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override {
    std::vector<TaskSpec> t;
    for (uint32_t i = 0; i < spec.tasks; ++i) t.push_back({std::to_string(i), 1e6});
    return t;
  }
  Result<std::string> Run(std::string_view p, const RunContext&) const override {
    return std::string(p);
  }
  Result<nlohmann::json> Merge(const JobSpec&,
                               const std::vector<std::string_view>& outputs) const override {
    return nlohmann::json{{"outputs", std::vector<std::string>(outputs.begin(), outputs.end())}};
  }
  bool Equivalent(std::string_view, std::string_view a, std::string_view b) const override {
    return a == b;
  }
  bool ClosesEarly() const override { return true; }
};

class WholeApp final : public App {
 public:
  std::string_view Name() const override { return "whole"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec&) const override {
    return std::vector<TaskSpec>{{"0", 1}};
  }
  Result<std::string> Run(std::string_view p, const RunContext&) const override {
    return std::string(p);
  }
  Result<nlohmann::json> Merge(const JobSpec&, const std::vector<std::string_view>&) const override {
    return nlohmann::json::object();
  }
  bool Equivalent(std::string_view, std::string_view a, std::string_view b) const override {
    return a == b;
  }
};

class DrivenApp final : public App {
 public:
  std::string_view Name() const override { return "driven"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec&) const override {
    return std::vector<TaskSpec>{};
  }
  Result<std::string> Run(std::string_view, const RunContext&) const override {
    return claw::Internal("no tasks");
  }
  Result<nlohmann::json> Merge(const JobSpec&, const std::vector<std::string_view>&) const override {
    return nlohmann::json::object();
  }
  bool Equivalent(std::string_view, std::string_view, std::string_view) const override {
    return true;
  }
  bool Driven() const override { return true; }
};

class CloseEarlyTest : public ::testing::Test {
 protected:
  CloseEarlyTest() : sched_(&apps_, Options()) {
    apps_.Register(std::make_unique<PartialApp>());
    apps_.Register(std::make_unique<WholeApp>());
    apps_.Register(std::make_unique<DrivenApp>());
  }
  static SchedulerOptions Options() {
    SchedulerOptions o;
    o.min_lease = std::chrono::minutes(10);  // longer than any deadline here
    return o;
  }
  PlannedJob Plan(const std::string& extra, uint32_t tasks = 4) {
    auto p = ParseAndPlanJob(R"({"app":"partial","tasks":)" + std::to_string(tasks) + extra + "}",
                             apps_);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return std::move(p).value();
  }
  // Four agents, one task each.
  std::map<AgentId, Assignment> Spread(int agents = 4) {
    std::map<AgentId, Assignment> out;
    for (int i = 0; i < agents; ++i) {
      AgentId a = "a" + std::to_string(i);
      sched_.AgentConnected(a, 1e9, {}, clock_.Now());
      sched_.AddDemand(a, 1);
    }
    for (auto& aa : sched_.Dispatch(clock_.Now())) out[aa.agent] = aa.assignments.at(0);
    return out;
  }
  ResultOutcome Report(const AgentId& agent, const Assignment& a) {
    std::vector<ResultIn> r{{a.lease, a.params, 10}};
    return sched_.AcceptResults(agent, r, clock_.Now())[0];
  }
  nlohmann::json Result(const JobId& id) {
    return nlohmann::json::parse(sched_.GetJob(id)->record.result_json);
  }

  FakeClock clock_;
  AppRegistry apps_;
  Scheduler sched_;
};

TEST_F(CloseEarlyTest, AJobClosesWhenEnoughAreDoneAndCancelsTheRest) {
  ASSERT_TRUE(sched_.AddJob("j", "u", Plan(R"(,"close_done":2)"), clock_.Now()).ok());
  auto got = Spread();
  ASSERT_EQ(got.size(), 4u);
  sched_.TakeNotices();
  EXPECT_EQ(Report("a2", got["a2"]), ResultOutcome::kAccepted);
  EXPECT_EQ(sched_.GetJob("j")->record.state, JobState::kRunning);
  EXPECT_EQ(Report("a0", got["a0"]), ResultOutcome::kAccepted);
  ASSERT_EQ(sched_.GetJob("j")->record.state, JobState::kDone);
  EXPECT_EQ(Result("j")["outputs"], nlohmann::json({"0", "", got["a2"].params, ""}));
  // The two still running are told to stop; their late results are stale.
  auto notices = sched_.TakeNotices();
  EXPECT_EQ(notices.cancels["a1"], std::vector<LeaseId>{got["a1"].lease});
  EXPECT_EQ(notices.cancels["a3"], std::vector<LeaseId>{got["a3"].lease});
  EXPECT_EQ(Report("a1", got["a1"]), ResultOutcome::kStale);
  EXPECT_EQ(sched_.active_leases(), 0u);
  EXPECT_EQ(sched_.pending_tasks(), 0u);
}

TEST_F(CloseEarlyTest, AtItsDeadlineAJobClosesWithWhatIsDoneOrWaitsForTheMinimum) {
  ASSERT_TRUE(sched_.AddJob("j", "u", Plan(R"(,"close_done":3,"close_after_s":60,"close_min":2)"),
                            clock_.Now())
                  .ok());
  auto got = Spread();
  EXPECT_EQ(Report("a0", got["a0"]), ResultOutcome::kAccepted);
  clock_.Advance(seconds(61));
  ASSERT_TRUE(sched_.NextWakeup().has_value());
  sched_.Tick(clock_.Now());
  // One done, two needed at the deadline: it waits for the next.
  EXPECT_EQ(sched_.GetJob("j")->record.state, JobState::kRunning);
  EXPECT_EQ(Report("a3", got["a3"]), ResultOutcome::kAccepted);
  ASSERT_EQ(sched_.GetJob("j")->record.state, JobState::kDone);
  EXPECT_EQ(Result("j")["outputs"], nlohmann::json({"0", "", "", "3"}));
}

TEST_F(CloseEarlyTest, AFailedTaskLeavesTheJobRunningWhileEnoughMayStillBeDone) {
  auto plan = ParseAndPlanJob(R"({"app":"partial","tasks":3,"close_done":2,"max_attempts":1})",
                              apps_);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(sched_.AddJob("j", "u", std::move(plan).value(), clock_.Now()).ok());
  auto got = Spread(3);
  ASSERT_TRUE(sched_.TaskFailed("a0", got["a0"].lease, "worker crashed", clock_.Now()));
  EXPECT_EQ(sched_.GetJob("j")->record.state, JobState::kRunning);
  ASSERT_TRUE(sched_.TaskFailed("a1", got["a1"].lease, "worker crashed", clock_.Now()));
  // Two of three failed: two can no longer be done.
  EXPECT_EQ(sched_.GetJob("j")->record.state, JobState::kFailed);
}

TEST_F(CloseEarlyTest, AFailedReplicatedTaskStopsItsOtherReplicas) {
  auto plan = ParseAndPlanJob(
      R"({"app":"partial","tasks":2,"close_done":1,"max_attempts":1,"replication":2,"adaptive":false})",
      apps_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(sched_.AddJob("j", "u", std::move(plan).value(), clock_.Now()).ok());
  auto got = Spread(4);
  ASSERT_EQ(got.size(), 4u);
  ASSERT_EQ(sched_.active_leases(), 4u);
  sched_.TakeNotices();
  // a0's task fails; its other replica is told to stop, the other task runs on.
  ASSERT_TRUE(sched_.TaskFailed("a0", got["a0"].lease, "worker crashed", clock_.Now()));
  EXPECT_EQ(sched_.GetJob("j")->record.state, JobState::kRunning);
  EXPECT_EQ(sched_.active_leases(), 2u);
  auto notices = sched_.TakeNotices();
  size_t cancelled = 0;
  for (const auto& [agent, leases] : notices.cancels) {
    for (LeaseId l : leases) {
      EXPECT_EQ(got[agent].params, got["a0"].params) << "only the failed task's replica stops";
      EXPECT_EQ(l, got[agent].lease);
      ++cancelled;
    }
  }
  EXPECT_EQ(cancelled, 1u);
  EXPECT_EQ(sched_.pending_tasks(), 0u);
}

TEST_F(CloseEarlyTest, ARestartedSchedulerKeepsAClosedJobClosed) {
  auto store = NewMemoryStore();
  ASSERT_TRUE(sched_.AddJob("j", "u", Plan(R"(,"close_done":3)"), clock_.Now()).ok());
  auto got = Spread();
  EXPECT_EQ(Report("a0", got["a0"]), ResultOutcome::kAccepted);
  EXPECT_EQ(Report("a1", got["a1"]), ResultOutcome::kAccepted);
  ASSERT_TRUE(store->Apply(sched_.TakeBatch()).ok());
  // The coordinator dies; when it comes back, a2 and a3 report.
  Scheduler restored(&apps_, Options());
  auto state = store->Load();
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(restored.Restore(std::move(state).value(), clock_.Now()).ok());
  restored.AgentConnected("a2", 1e9, {got["a2"].lease}, clock_.Now());
  restored.AgentConnected("a3", 1e9, {got["a3"].lease}, clock_.Now());
  std::vector<ResultIn> r{{got["a3"].lease, got["a3"].params, 10}};
  EXPECT_EQ(restored.AcceptResults("a3", r, clock_.Now())[0], ResultOutcome::kAccepted);
  ASSERT_EQ(restored.GetJob("j")->record.state, JobState::kDone);
  ASSERT_TRUE(store->Apply(restored.TakeBatch()).ok());
  EXPECT_EQ(nlohmann::json::parse(restored.GetJob("j")->record.result_json)["outputs"],
            nlohmann::json({"0", "1", "", "3"}));
  // Once more: the closed job stays as it ended.
  Scheduler again(&apps_, Options());
  auto state2 = store->Load();
  ASSERT_TRUE(state2.ok());
  ASSERT_TRUE(again.Restore(std::move(state2).value(), clock_.Now()).ok());
  EXPECT_EQ(again.GetJob("j")->record.state, JobState::kDone);
  EXPECT_EQ(again.pending_tasks(), 0u);
}

TEST_F(CloseEarlyTest, SpecsThatCannotCloseAreRefusedNamingTheField) {
  auto refused = [&](const std::string& spec) {
    auto p = ParseAndPlanJob(spec, apps_);
    return p.ok() ? std::string("accepted") : p.status().message();
  };
  EXPECT_NE(refused(R"({"app":"partial","tasks":4,"close_done":5})").find("spec.close_done"),
            std::string::npos);
  EXPECT_NE(refused(R"({"app":"partial","tasks":4,"close_min":2})").find("spec.close_min"),
            std::string::npos);
  EXPECT_NE(refused(R"({"app":"partial","tasks":4,"close_done":2,"close_after_s":5,"close_min":3})")
                .find("spec.close_min: more than close_done"),
            std::string::npos);
  EXPECT_NE(refused(R"({"app":"partial","tasks":4,"close_done":0})").find("spec.close_done"),
            std::string::npos);
  EXPECT_NE(refused(R"({"app":"whole","close_done":1})").find("ends only when every task"),
            std::string::npos);
}

TEST_F(CloseEarlyTest, ADrivenJobEndsOnlyWhenItsDriverEndsIt) {
  auto plan = ParseAndPlanJob(R"({"app":"driven"})", apps_);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(sched_.AddJob("d", "u", std::move(plan).value(), clock_.Now()).ok());
  sched_.Tick(clock_.Now());
  EXPECT_EQ(sched_.GetJob("d")->record.state, JobState::kRunning);
  EXPECT_FALSE(sched_.EndJob("nope", JobState::kDone, "{}", "", clock_.Now()).ok());
  ASSERT_TRUE(sched_.AddJob("w", "u", ParseAndPlanJob(R"({"app":"whole"})", apps_).value(),
                            clock_.Now())
                  .ok());
  EXPECT_EQ(sched_.EndJob("w", JobState::kDone, "{}", "", clock_.Now()).code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(sched_.EndJob("d", JobState::kDone, R"({"rounds":3})", "", clock_.Now()).ok());
  EXPECT_EQ(sched_.GetJob("d")->record.state, JobState::kDone);
  EXPECT_EQ(sched_.GetJob("d")->record.result_json, R"({"rounds":3})");
  EXPECT_FALSE(sched_.EndJob("d", JobState::kDone, "{}", "", clock_.Now()).ok());
}

TEST_F(CloseEarlyTest, ARejectedResultFailsTheTaskAndCountsAgainstTheAgent) {
  ASSERT_TRUE(sched_.AddJob("j", "u", Plan(R"(,"close_done":2)", 2), clock_.Now()).ok());
  auto got = Spread(2);
  uint64_t before = sched_.ReputationOf("a0").invalid;
  EXPECT_FALSE(sched_.ResultRejected("a1", got["a0"].lease, "not yours", clock_.Now()));
  ASSERT_TRUE(sched_.ResultRejected("a0", got["a0"].lease, "NaN in fc.weight", clock_.Now()));
  EXPECT_EQ(sched_.ReputationOf("a0").invalid, before + 1);
  EXPECT_EQ(sched_.pending_tasks(), 1u);  // to run again
  EXPECT_EQ(Report("a0", got["a0"]), ResultOutcome::kStale);
  sched_.CountWrongAnswer("a1", clock_.Now());
  EXPECT_EQ(sched_.ReputationOf("a1").invalid, 1u);
}

}  // namespace
}  // namespace claw

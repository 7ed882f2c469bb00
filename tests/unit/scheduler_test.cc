#include "core/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "common/clock.h"
#include "core/job_spec.h"
#include "store/store.h"

namespace claw {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Each task's output is its own params (its index); Merge checks that every
// output is in its place, so a misrouted or doubled result fails the job.
class EchoApp final : public App {
 public:
  std::string_view Name() const override { return "echo"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override {
    std::vector<TaskSpec> t;
    for (uint32_t i = 0; i < (spec.tasks ? spec.tasks : 1); ++i) {
      t.push_back({std::to_string(i), 1e6});
    }
    return t;
  }
  Result<std::string> Run(std::string_view p, const RunContext&) const override { return std::string(p); }
  Result<nlohmann::json> Merge(const JobSpec&,
                               const std::vector<std::string_view>& outputs) const override {
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i] != std::to_string(i)) return InvalidArgument("output " + std::to_string(i));
    }
    return nlohmann::json{{"n", outputs.size()}};
  }
  bool Equivalent(std::string_view, std::string_view a, std::string_view b) const override {
    return a == b;
  }
};

// Like echo, but its merge checks nothing: it lists the outputs, so a test
// can see whether a wrong one was accepted.
class ListApp final : public App {
 public:
  std::string_view Name() const override { return "list"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override {
    return EchoApp().Plan(spec);
  }
  Result<std::string> Run(std::string_view p, const RunContext&) const override { return std::string(p); }
  Result<nlohmann::json> Merge(const JobSpec&,
                               const std::vector<std::string_view>& outputs) const override {
    return nlohmann::json{{"outputs", std::vector<std::string>(outputs.begin(), outputs.end())}};
  }
  bool Equivalent(std::string_view, std::string_view a, std::string_view b) const override {
    return a == b;
  }
};

// A job that grows: each settled task with output "n" (n < 3) adds a task
// "n+1", once, as an early-stopping sweep adds its promotions.
class GrowApp final : public App {
 public:
  std::string_view Name() const override { return "grow"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec&) const override {
    return std::vector<TaskSpec>{{"0", 1e6}, {"0", 1e6}};
  }
  Result<std::string> Run(std::string_view p, const RunContext&) const override {
    return std::string(p.substr(0, p.find('@')));
  }
  Result<nlohmann::json> Merge(const JobSpec&,
                               const std::vector<std::string_view>& outputs) const override {
    return nlohmann::json{{"outputs", std::vector<std::string>(outputs.begin(), outputs.end())}};
  }
  bool Equivalent(std::string_view, std::string_view a, std::string_view b) const override {
    return a == b;
  }
  bool Grows(const JobSpec&) const override { return true; }
  // Output n < 2 adds task "n+1@parent", unless it is there already (what
  // was added is read from the tasks, not remembered).
  std::vector<TaskSpec> Expand(const JobSpec&, const std::vector<TaskView>& tasks,
                               uint32_t settled) const override {
    int n = std::stoi(std::string(tasks[settled].output));
    std::string child = std::to_string(n + 1) + "@" + std::to_string(settled);
    for (const auto& t : tasks) {
      if (t.params == child) return {};
    }
    return n < 2 ? std::vector<TaskSpec>{{child, 1e6}} : std::vector<TaskSpec>{};
  }
};

AppRegistry TestApps() {
  AppRegistry r;
  r.Register(std::make_unique<EchoApp>());
  r.Register(std::make_unique<ListApp>());
  r.Register(std::make_unique<GrowApp>());
  return r;
}

PlannedJob Plan(const AppRegistry& apps, uint32_t tasks, int max_attempts = 3) {
  auto p = ParseAndPlanJob(R"({"app":"echo","tasks":)" + std::to_string(tasks) +
                               R"(,"max_attempts":)" + std::to_string(max_attempts) + "}",
                           apps);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest() : apps_(TestApps()), sched_(&apps_, Options()) {}
  static SchedulerOptions Options() {
    SchedulerOptions o;
    o.min_lease = seconds(10);
    o.session_grace = seconds(5);
    return o;
  }
  std::vector<Assignment> DispatchTo(const AgentId& agent) {
    for (auto& a : sched_.Dispatch(clock_.Now())) {
      if (a.agent == agent) return a.assignments;
    }
    return {};
  }
  ResultOutcome Report(const AgentId& agent, const Assignment& a) {
    std::vector<ResultIn> r{{a.lease, a.params, 10}};
    return sched_.AcceptResults(agent, r, clock_.Now())[0];
  }

  FakeClock clock_;
  AppRegistry apps_;
  Scheduler sched_;
};

TEST_F(SchedulerTest, RunsAJobToCompletionAndMergesInOrder) {
  ASSERT_TRUE(sched_.AddJob("j1", "alice", Plan(apps_, 10), clock_.Now()).ok());
  sched_.AgentConnected("a1", 1e9, {}, clock_.Now());
  sched_.AddDemand("a1", 4);
  auto first = DispatchTo("a1");
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(sched_.GetJob("j1")->leased, 4u);
  // Report out of order: the merge must still see outputs by index.
  for (auto it = first.rbegin(); it != first.rend(); ++it) {
    EXPECT_EQ(Report("a1", *it), ResultOutcome::kAccepted);
  }
  sched_.AddDemand("a1", 100);
  auto rest = DispatchTo("a1");
  ASSERT_EQ(rest.size(), 6u);
  for (auto& a : rest) EXPECT_EQ(Report("a1", a), ResultOutcome::kAccepted);
  auto job = sched_.GetJob("j1");
  EXPECT_EQ(job->record.state, JobState::kDone);
  EXPECT_EQ(job->record.result_json, R"({"n":10})");
  EXPECT_EQ(job->record.task_runtime_us, 10u * 10);  // each report says 10 µs
  EXPECT_EQ(sched_.active_leases(), 0u);
}

TEST_F(SchedulerTest, ReplicasOfATaskNeverGoToTwoAgentsOfOneOwner) {
  auto p = ParseAndPlanJob(R"({"app":"echo","tasks":4,"replication":2,"quorum":2})", apps_);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(sched_.AddJob("j1", "carol", std::move(p).value(), clock_.Now()).ok());
  for (const char* a : {"m1", "m2", "o1"}) sched_.AgentConnected(a, 1e9, {}, clock_.Now());
  sched_.SetAgentOwner("m1", "mallory");
  sched_.SetAgentOwner("m2", "mallory");
  // mallory's two devices ask first and for everything: they share one
  // replica of each task between them; the other replica waits for o1.
  sched_.AddDemand("m1", 8);
  sched_.AddDemand("m2", 8);
  size_t mallory = 0;
  for (const auto& a : sched_.Dispatch(clock_.Now())) mallory += a.assignments.size();
  EXPECT_EQ(mallory, 4u);
  sched_.AddDemand("o1", 8);
  EXPECT_EQ(DispatchTo("o1").size(), 4u);
  // Unknown owners (empty) are each their own.
  sched_.SetAgentOwner("m2", "");
  EXPECT_EQ(sched_.GetJob("j1")->leased, 8u);
}

TEST_F(SchedulerTest, AGrowingJobEndsOnlyWhenItsAppAddsNoMoreAndSurvivesARestart) {
  auto store = NewMemoryStore();
  auto p = ParseAndPlanJob(R"({"app":"grow"})", apps_);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(sched_.AddJob("j1", "alice", std::move(p).value(), clock_.Now()).ok());
  sched_.AgentConnected("a1", 1e9, {}, clock_.Now());
  sched_.AddDemand("a1", 100);
  auto first = DispatchTo("a1");
  ASSERT_EQ(first.size(), 2u);
  for (const auto& a : first) {
    std::vector<ResultIn> r{{a.lease, "0", 10}};
    EXPECT_EQ(sched_.AcceptResults("a1", r, clock_.Now())[0], ResultOutcome::kAccepted);
  }
  EXPECT_EQ(sched_.GetJob("j1")->record.state, JobState::kRunning);
  EXPECT_EQ(sched_.GetJob("j1")->record.n_tasks, 4u) << "each settled task added one";
  ASSERT_TRUE(store->Apply(sched_.TakeBatch()).ok());

  // The coordinator restarts: the added tasks are there, and run.
  Scheduler restored(&apps_, Options());
  auto state = store->Load();
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(restored.Restore(std::move(state).value(), clock_.Now()).ok());
  restored.AgentConnected("a1", 1e9, {}, clock_.Now());
  for (int round = 0; round < 5 && restored.GetJob("j1")->record.state == JobState::kRunning;
       ++round) {
    restored.AddDemand("a1", 100);
    for (auto& d : restored.Dispatch(clock_.Now())) {
      for (const auto& a : d.assignments) {
        std::vector<ResultIn> r{{a.lease, a.params.substr(0, a.params.find('@')), 10}};
        restored.AcceptResults("a1", r, clock_.Now());
      }
    }
  }
  auto job = restored.GetJob("j1");
  ASSERT_EQ(job->record.state, JobState::kDone) << job->record.error;
  EXPECT_EQ(job->record.n_tasks, 6u) << "0, 0, then 1 and 2 under each";
  EXPECT_EQ(job->record.result_json, R"({"outputs":["0","0","1","1","2","2"]})");
}

// Long tasks are not hoarded by whoever asks first: beyond one per slot, an
// agent gets tasks only while its held work is under the buffer; estimates
// learn from the run times reported.
TEST_F(SchedulerTest, TheWorkBufferBoundsLongTasksAndLearnsTheirRealLength) {
  ASSERT_TRUE(sched_.AddJob("j1", "alice", Plan(apps_, 100), clock_.Now()).ok());
  sched_.AgentConnected("slow", 1e5, {}, clock_.Now());  // 1e6 flop tasks: 10 s each, it seems
  sched_.SetAgentSlots("slow", 2);
  sched_.AddDemand("slow", 50);
  auto first = DispatchTo("slow");
  ASSERT_EQ(first.size(), 2u) << "one per slot, then the buffer is full";
  for (const auto& a : first) {
    std::vector<ResultIn> r{{a.lease, a.params, 10'000}};  // they took 10 ms
    sched_.AcceptResults("slow", r, clock_.Now());
  }
  sched_.AddDemand("slow", 50);
  EXPECT_GE(DispatchTo("slow").size(), 50u) << "10 ms tasks: the buffer holds many";
}

// An agent that said which apps it can run (no sandbox, no ML library) gets
// only tasks of those; one that said nothing gets any.
TEST_F(SchedulerTest, AgentsGetOnlyTasksOfAppsTheyCanRun) {
  auto p = ParseAndPlanJob(R"({"app":"list","tasks":3})", apps_);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(sched_.AddJob("j1", "alice", std::move(p).value(), clock_.Now()).ok());
  sched_.AgentConnected("narrow", 1e9, {}, clock_.Now());
  sched_.SetAgentApps("narrow", {"echo"});
  sched_.AddDemand("narrow", 10);
  EXPECT_TRUE(DispatchTo("narrow").empty());
  ASSERT_TRUE(sched_.AddJob("j2", "alice", Plan(apps_, 2), clock_.Now()).ok());
  EXPECT_EQ(DispatchTo("narrow").size(), 2u) << "echo it can run";
  sched_.AgentConnected("any", 1e9, {}, clock_.Now());
  sched_.AddDemand("any", 10);
  EXPECT_EQ(DispatchTo("any").size(), 3u);
}

// The dashboard's "why does this device get no work": nothing queued, a
// queue of jobs it cannot run (naming the apps), then work.
TEST_F(SchedulerTest, AnIdleAgentIsToldWhyItGetsNoWork) {
  sched_.AgentConnected("narrow", 1e9, {}, clock_.Now());
  sched_.SetAgentApps("narrow", {"echo"});
  EXPECT_EQ(sched_.WorkOf("narrow").why_no_work, "it asks for no work");
  sched_.AddDemand("narrow", 2);
  EXPECT_EQ(sched_.WorkOf("narrow").why_no_work, "no work queued");
  auto p = ParseAndPlanJob(R"({"app":"list","tasks":3})", apps_);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(sched_.AddJob("j1", "alice", std::move(p).value(), clock_.Now()).ok());
  EXPECT_TRUE(DispatchTo("narrow").empty());
  const Scheduler::AgentWork w = sched_.WorkOf("narrow");
  EXPECT_NE(w.why_no_work.find("need apps it does not run (list)"), std::string::npos) << w.why_no_work;
  ASSERT_TRUE(sched_.AddJob("j2", "alice", Plan(apps_, 2), clock_.Now()).ok());
  EXPECT_EQ(sched_.WorkOf("narrow").why_no_work, "") << "it could take j2's tasks";
  EXPECT_EQ(DispatchTo("narrow").size(), 2u);
  const Scheduler::AgentWork busy = sched_.WorkOf("narrow");
  EXPECT_EQ(busy.leases, 2u);
  EXPECT_EQ(busy.jobs, std::vector<JobId>{"j2"});
  EXPECT_FALSE(sched_.WorkOf("nobody").known);
  EXPECT_EQ(sched_.running_jobs(), 2u);
}

TEST_F(SchedulerTest, DuplicateAndForeignResultsChangeNothing) {
  ASSERT_TRUE(sched_.AddJob("j1", "alice", Plan(apps_, 2), clock_.Now()).ok());
  sched_.AgentConnected("a1", 1e9, {}, clock_.Now());
  sched_.AgentConnected("a2", 1e9, {}, clock_.Now());
  sched_.AddDemand("a1", 1);
  auto a = DispatchTo("a1");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(Report("a2", a[0]), ResultOutcome::kNotYours);
  EXPECT_EQ(sched_.GetJob("j1")->done, 0u);
  EXPECT_EQ(Report("a1", a[0]), ResultOutcome::kAccepted);
  EXPECT_EQ(Report("a1", a[0]), ResultOutcome::kStale);
  EXPECT_EQ(sched_.GetJob("j1")->done, 1u);
}

TEST_F(SchedulerTest, ExpiredLeaseIsReissuedAndCountsAnAttempt) {
  ASSERT_TRUE(sched_.AddJob("j1", "alice", Plan(apps_, 1, 2), clock_.Now()).ok());
  sched_.AgentConnected("a1", 1e9, {}, clock_.Now());
  sched_.AddDemand("a1", 1);
  auto a = DispatchTo("a1");
  ASSERT_EQ(a.size(), 1u);
  clock_.Advance(seconds(11));
  sched_.Tick(clock_.Now());
  auto notices = sched_.TakeNotices();
  EXPECT_EQ(notices.cancels["a1"], std::vector<LeaseId>{a[0].lease});
  EXPECT_EQ(Report("a1", a[0]), ResultOutcome::kStale);  // too late
  sched_.AddDemand("a1", 1);
  auto again = DispatchTo("a1");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_NE(again[0].lease, a[0].lease);
  clock_.Advance(seconds(11));
  sched_.Tick(clock_.Now());  // second expiry: attempts exhausted
  auto job = sched_.GetJob("j1");
  EXPECT_EQ(job->record.state, JobState::kFailed);
  EXPECT_NE(job->record.error.find("task 0 failed 2 times"), std::string::npos);
}

// A task longer than its lease lives on its agent's renewals, up to the
// job's task_timeout; unrenewed (or another agent's word) it expires.
TEST_F(SchedulerTest, RunningTasksKeepTheirLeasesByRenewalUpToTheTaskTimeout) {
  auto p = ParseAndPlanJob(R"({"app":"echo","tasks":2,"max_attempts":3,"task_timeout_s":60})", apps_);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(sched_.AddJob("j1", "alice", std::move(p).value(), clock_.Now()).ok());
  sched_.AgentConnected("a1", 1e9, {}, clock_.Now());
  sched_.AgentConnected("a2", 1e9, {}, clock_.Now());
  sched_.AddDemand("a1", 2);
  auto a = DispatchTo("a1");
  ASSERT_EQ(a.size(), 2u);
  // Every 5 s for 50 s, a1 says it runs the first; a2 claims the second.
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(seconds(5));
    EXPECT_EQ(sched_.RenewLeases("a1", {a[0].lease}, {a[0].lease}, clock_.Now()), 1u);
    EXPECT_EQ(sched_.RenewLeases("a2", {a[1].lease}, {a[1].lease}, clock_.Now()), 0u) << "not a2's lease";
    sched_.Tick(clock_.Now());
  }
  EXPECT_EQ(sched_.active_leases(), 1u) << "the unrenewed lease expired after 10 s";
  EXPECT_EQ(sched_.pending_tasks(), 1u) << "and its task waits for another agent";
  EXPECT_EQ(Report("a1", a[0]), ResultOutcome::kAccepted) << "50 s on a 10 s lease";
  EXPECT_EQ(Report("a1", a[1]), ResultOutcome::kStale);
  // Renewals stop at task_timeout_s from the grant.
  ASSERT_TRUE(sched_.CancelJob("j1", clock_.Now()).ok());
  auto q = ParseAndPlanJob(R"({"app":"echo","tasks":1,"max_attempts":1,"task_timeout_s":30})", apps_);
  ASSERT_TRUE(sched_.AddJob("j2", "alice", std::move(q).value(), clock_.Now()).ok());
  sched_.AddDemand("a1", 1);
  auto b = DispatchTo("a1");
  ASSERT_EQ(b.size(), 1u);
  for (int i = 0; i < 8; ++i) {
    clock_.Advance(seconds(5));
    sched_.RenewLeases("a1", {b[0].lease}, {}, clock_.Now());
    sched_.Tick(clock_.Now());
  }
  EXPECT_EQ(Report("a1", b[0]), ResultOutcome::kStale) << "past 30 s, renewed or not";
  EXPECT_EQ(sched_.GetJob("j2")->record.state, JobState::kFailed);
}

TEST_F(SchedulerTest, TheTaskTimeoutCountsFromATasksStartNotFromItsTimeQueued) {
  auto p = ParseAndPlanJob(R"({"app":"echo","tasks":2,"max_attempts":1,"task_timeout_s":30})", apps_);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(sched_.AddJob("j1", "alice", std::move(p).value(), clock_.Now()).ok());
  sched_.AgentConnected("a1", 1e9, {}, clock_.Now());
  sched_.AddDemand("a1", 2);
  auto a = DispatchTo("a1");
  ASSERT_EQ(a.size(), 2u);
  // One slot: the first runs for 20 s while the second waits behind it,
  // then the second runs for 30 s. Both are renewed every 5 s.
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(seconds(5));
    std::vector<LeaseId> held = {a[1].lease};
    std::vector<LeaseId> started = {i < 4 ? a[0].lease : a[1].lease};
    if (i < 4) held.push_back(a[0].lease);
    sched_.RenewLeases("a1", held, started, clock_.Now());
    sched_.Tick(clock_.Now());
    if (i == 3) {
      EXPECT_EQ(Report("a1", a[0]), ResultOutcome::kAccepted);
    }
  }
  EXPECT_EQ(Report("a1", a[1]), ResultOutcome::kAccepted)
      << "50 s after its grant, 25 s after its start was reported, under a 30 s task_timeout";
  // Reporting a start again does not move the cap on.
  auto q = ParseAndPlanJob(R"({"app":"echo","tasks":1,"max_attempts":1,"task_timeout_s":30})", apps_);
  ASSERT_TRUE(sched_.AddJob("j2", "alice", std::move(q).value(), clock_.Now()).ok());
  sched_.AddDemand("a1", 1);
  auto b = DispatchTo("a1");
  ASSERT_EQ(b.size(), 1u);
  for (int i = 0; i < 8; ++i) {
    clock_.Advance(seconds(5));
    sched_.RenewLeases("a1", {b[0].lease}, {b[0].lease}, clock_.Now());
    sched_.Tick(clock_.Now());
  }
  EXPECT_EQ(Report("a1", b[0]), ResultOutcome::kStale) << "past 30 s from its start";
}

TEST_F(SchedulerTest, LostSessionKeepsLeasesForGraceThenReissues) {
  ASSERT_TRUE(sched_.AddJob("j1", "alice", Plan(apps_, 2), clock_.Now()).ok());
  sched_.AgentConnected("a1", 1e9, {}, clock_.Now());
  sched_.AddDemand("a1", 2);
  auto a = DispatchTo("a1");
  ASSERT_EQ(a.size(), 2u);
  sched_.AgentDisconnected("a1", clock_.Now());
  clock_.Advance(seconds(2));
  sched_.Tick(clock_.Now());
  EXPECT_EQ(sched_.active_leases(), 2u);
  // Back within the grace period, holding only the first lease.
  auto invalid = sched_.AgentConnected("a1", 1e9, {a[0].lease, 999}, clock_.Now());
  EXPECT_EQ(invalid, std::vector<LeaseId>{999});
  EXPECT_EQ(sched_.active_leases(), 1u);
  EXPECT_EQ(sched_.pending_tasks(), 1u);
  EXPECT_EQ(Report("a1", a[0]), ResultOutcome::kAccepted);
  // Gone for good: the rest is re-issued after the grace period.
  sched_.AddDemand("a1", 1);
  ASSERT_EQ(DispatchTo("a1").size(), 1u);
  sched_.AgentDisconnected("a1", clock_.Now());
  clock_.Advance(seconds(6));
  sched_.Tick(clock_.Now());
  EXPECT_EQ(sched_.active_leases(), 0u);
  EXPECT_EQ(sched_.pending_tasks(), 1u);
}

TEST_F(SchedulerTest, CancelStopsLeasesAndRefusesTwice) {
  ASSERT_TRUE(sched_.AddJob("j1", "alice", Plan(apps_, 5), clock_.Now()).ok());
  sched_.AgentConnected("a1", 1e9, {}, clock_.Now());
  sched_.AddDemand("a1", 2);
  auto a = DispatchTo("a1");
  sched_.TakeNotices();
  ASSERT_TRUE(sched_.CancelJob("j1", clock_.Now()).ok());
  EXPECT_EQ(sched_.TakeNotices().cancels["a1"].size(), 2u);
  EXPECT_EQ(sched_.pending_tasks(), 0u);
  EXPECT_EQ(sched_.CancelJob("j1", clock_.Now()).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(sched_.CancelJob("nope", clock_.Now()).code(), StatusCode::kNotFound);
  EXPECT_EQ(Report("a1", a[0]), ResultOutcome::kStale);
}

TEST_F(SchedulerTest, HigherPriorityJobsGoFirst) {
  auto low = ParseAndPlanJob(R"({"app":"echo","tasks":3,"priority":0})", apps_);
  auto high = ParseAndPlanJob(R"({"app":"echo","tasks":3,"priority":5})", apps_);
  ASSERT_TRUE(sched_.AddJob("low", "u", std::move(low).value(), clock_.Now()).ok());
  ASSERT_TRUE(sched_.AddJob("high", "u", std::move(high).value(), clock_.Now()).ok());
  sched_.AgentConnected("a1", 1e9, {}, clock_.Now());
  sched_.AddDemand("a1", 4);
  auto a = DispatchTo("a1");
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0].job, "high");
  EXPECT_EQ(a[2].job, "high");
  EXPECT_EQ(a[3].job, "low");
}

// Hours of a network in a fraction of a second: agents join and leave, some
// tasks hang, the coordinator crashes and restores from its store. Every
// `rogue_every`-th agent (0: none) answers every task wrongly; every
// `turncoat_every`-th (counting from 1) is honest for 10 minutes, long enough
// to be trusted, and then lies: on every answer, or on every
// `turncoat_lies_every`-th (honest answers in between pass spot checks).
struct SimulationSetup {
  int replication = 1;
  bool adaptive = false;
  int rogue_every = 0;
  int turncoat_every = 0;
  int turncoat_lies_every = 1;
};

void SimulateChurn(const SimulationSetup& setup) {
  AppRegistry apps = TestApps();
  FakeClock clock;
  auto store = NewMemoryStore();
  SchedulerOptions opts;
  opts.min_lease = seconds(30);
  opts.session_grace = seconds(10);
  auto sched = std::make_unique<Scheduler>(&apps, opts);
  std::mt19937_64 rng(12345);

  constexpr int kJobs = 20, kTasksPerJob = 250, kAgents = 40;
  const Time turn_at = clock.Now() + std::chrono::minutes(10);
  auto rogue = [&](const AgentId& id) {
    return setup.rogue_every > 0 && std::stoi(id.substr(1)) % setup.rogue_every == 0;
  };
  auto turncoat = [&](const AgentId& id) {
    return setup.turncoat_every > 0 && std::stoi(id.substr(1)) % setup.turncoat_every == 1;
  };
  for (int j = 0; j < kJobs; ++j) {
    auto planned = ParseAndPlanJob(
        R"({"app":"list","tasks":250,"max_attempts":20,"replication":)" +
            std::to_string(setup.replication) +
            R"(,"adaptive":)" + (setup.adaptive ? "true" : "false") + "}",
        apps);
    ASSERT_TRUE(planned.ok());
    ASSERT_TRUE(sched->AddJob("j" + std::to_string(j), "u", std::move(planned).value(),
                              clock.Now())
                    .ok());
  }
  struct Running {
    Assignment a;
    Time finish;
  };
  std::map<AgentId, std::vector<Running>> running;  // agents' local view
  std::map<AgentId, bool> online;
  std::map<std::pair<JobId, uint32_t>, int> accepted;
  std::map<LeaseId, std::pair<JobId, uint32_t>> task_of;
  std::map<AgentId, int> turned_answers;  // a turncoat's answers since it turned
  int crashes = 0, unchecked = 0, revoked = 0;
  auto commit = [&] {
    StoreBatch batch = sched->TakeBatch();
    for (const auto& v : batch.verdicts) {
      unchecked += v.verdict == Verdict::kUnverified;
      revoked += v.verdict == Verdict::kRevoked;
    }
    ASSERT_TRUE(store->Apply(batch).ok());
  };

  const Time end = clock.Now() + std::chrono::hours(6);
  while (clock.Now() < end) {
    clock.Advance(milliseconds(200));
    Time now = clock.Now();
    for (int i = 0; i < kAgents; ++i) {
      AgentId id = "a" + std::to_string(i);
      bool was = online[id];
      double u = std::uniform_real_distribution<>(0, 1)(rng);
      if (!was && u < 0.02) {  // joins (or rejoins, keeping what it runs)
        std::vector<LeaseId> held;
        for (auto& r : running[id]) held.push_back(r.a.lease);
        auto invalid = sched->AgentConnected(id, 1e9, held, now);
        std::erase_if(running[id], [&](const Running& r) {
          return std::find(invalid.begin(), invalid.end(), r.a.lease) != invalid.end();
        });
        sched->AddDemand(id, 2 - static_cast<uint32_t>(std::min<size_t>(2, running[id].size())));
        online[id] = true;
      } else if (was && u < 0.005) {  // leaves, maybe for ever (loses its work)
        sched->AgentDisconnected(id, now);
        online[id] = false;
        if (u < 0.002) running[id].clear();
      }
    }
    for (auto& [agent, list] : running) {
      if (!online[agent]) continue;
      std::vector<ResultIn> results;
      std::erase_if(list, [&](const Running& r) {
        if (r.finish > now) return false;
        // A rogue agent's answers are wrong, and differ from other rogues'.
        bool lying = rogue(agent) ||
                     (turncoat(agent) && now >= turn_at &&
                      ++turned_answers[agent] % setup.turncoat_lies_every == 0);
        std::string output = lying ? "forged-" + agent + "-" + r.a.params : r.a.params;
        results.push_back({r.a.lease, std::move(output), 1000});
        return true;
      });
      if (results.empty()) continue;
      std::vector<std::pair<JobId, uint32_t>> keys;
      for (auto& r : results) keys.push_back(task_of[r.lease]);
      auto outcomes = sched->AcceptResults(agent, results, now);
      for (size_t k = 0; k < outcomes.size(); ++k) {
        if (outcomes[k] == ResultOutcome::kAccepted) accepted[keys[k]]++;
      }
      sched->AddDemand(agent, static_cast<uint32_t>(results.size()));
    }
    sched->Tick(now);
    for (auto& aa : sched->Dispatch(now)) {
      for (auto& a : aa.assignments) {
        // Some tasks hang (an agent that never finishes): only expiry saves them.
        int64_t ms = std::uniform_int_distribution<int64_t>(500, 20'000)(rng);
        if (std::uniform_real_distribution<>(0, 1)(rng) < 0.01) ms = 3'600'000;
        running[aa.agent].push_back({a, now + milliseconds(ms)});
        task_of[a.lease] = {a.job, a.index};
      }
    }
    Notices notices = sched->TakeNotices();
    for (auto& [agent, leases] : notices.cancels) {
      std::erase_if(running[agent], [&](const Running& r) {
        return std::find(leases.begin(), leases.end(), r.a.lease) != leases.end();
      });
    }
    commit();
    if (std::uniform_real_distribution<>(0, 1)(rng) < 0.0005) {  // coordinator crash
      crashes++;
      sched = std::make_unique<Scheduler>(&apps, opts);
      auto state = store->Load();
      ASSERT_TRUE(state.ok());
      ASSERT_TRUE(sched->Restore(std::move(state).value(), now).ok());
      for (auto& [id, on] : online) on = false;  // every session dropped
    }
  }
  int done = 0;
  uint64_t work_us = 0;
  for (int j = 0; j < kJobs; ++j) {
    auto job = sched->GetJob("j" + std::to_string(j));
    ASSERT_TRUE(job.has_value());
    ASSERT_EQ(job->record.state, JobState::kDone) << job->record.error;
    done += job->record.state == JobState::kDone;
    // Every accepted output is the right one.
    auto result = nlohmann::json::parse(job->record.result_json, nullptr, false);
    ASSERT_TRUE(result.is_object()) << job->record.result_json;
    for (uint32_t i = 0; i < kTasksPerJob; ++i) {
      ASSERT_EQ(result["outputs"][i], std::to_string(i)) << job->record.id << "/" << i;
    }
    // Run time is counted once per accepted report (each says 1 ms), across
    // every crash and restore.
    if (setup.replication == 1) {
      EXPECT_EQ(job->record.task_runtime_us, uint64_t{kTasksPerJob} * 1000);
    } else if (!setup.adaptive) {
      EXPECT_GE(job->record.task_runtime_us, uint64_t{kTasksPerJob} * 1000 * setup.replication);
    }
    work_us += job->record.task_runtime_us;
  }
  if (setup.adaptive) {
    // What redundancy cost, against running each task once.
    double overhead = static_cast<double>(work_us) / (kJobs * kTasksPerJob * 1000.0);
    std::printf("adaptive replication: %.2fx the work of running each task once; %d results "
                "accepted unchecked, %d of them revoked\n",
                overhead, unchecked, revoked);
    EXPECT_LT(overhead, static_cast<double>(setup.replication));
    EXPECT_GT(unchecked, 0);
    if (setup.turncoat_every > 0) {
      EXPECT_GT(revoked, 0);
    }
  }
  EXPECT_EQ(done, kJobs);
  EXPECT_EQ(accepted.size(), static_cast<size_t>(kJobs * kTasksPerJob));
  for (const auto& [key, n] : accepted) {
    if (setup.replication == 1) {
      EXPECT_EQ(n, 1) << key.first << "/" << key.second;
    } else if (!setup.adaptive) {
      EXPECT_GE(n, setup.replication) << key.first << "/" << key.second;
    }
  }
  EXPECT_GT(crashes, 0);
  EXPECT_EQ(sched->active_leases(), 0u);
  if (setup.rogue_every > 0) {
    for (int i = 0; i < kAgents; ++i) {
      AgentId id = "a" + std::to_string(i);
      Reputation rep = sched->ReputationOf(id);
      if (rogue(id)) {
        EXPECT_EQ(rep.valid, 0u) << id;
        EXPECT_GT(rep.error_rate, 0.5) << id;
      } else if (turncoat(id)) {
        EXPECT_GT(rep.invalid, 0u) << id;
      } else {
        EXPECT_EQ(rep.invalid, 0u) << id;
      }
    }
  }
  // Finished jobs come back from the store with their run time.
  Scheduler restored(&apps, opts);
  auto state = store->Load();
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(restored.Restore(std::move(state).value(), clock.Now()).ok());
  EXPECT_EQ(restored.GetJob("j0")->record.task_runtime_us,
            sched->GetJob("j0")->record.task_runtime_us);
}

TEST(SchedulerSimulation, EveryTaskCompletesExactlyOnceUnderChurnAndCrashes) {
  SimulateChurn({});
}

// 2 of 2 with every fifth agent lying: every job ends with every output
// right, so no forged answer was accepted.
TEST(SchedulerSimulation, WithOneAgentInFiveRogueNoForgedResultIsAccepted) {
  SimulateChurn({.replication = 2, .rogue_every = 5});
}

// The same with adaptive replication, and a further one agent in ten that
// earns trust and then lies: spot checks catch it, its unchecked results run
// again, and since no job ends while it holds unchecked results, every job
// ends right.
TEST(SchedulerSimulation, AdaptiveReplicationCatchesTrustedAgentsThatTurn) {
  SimulateChurn({.replication = 2, .adaptive = true, .rogue_every = 5, .turncoat_every = 10});
}

// A turncoat that lies on every third answer only: its honest answers pass
// spot checks and vouch for lies given before them. Once a check catches it,
// every answer it gave on its own word in a job not yet merged goes back to
// a vote, vouched for or not, so every job still ends with every output
// right (before that rule, vouched lies stayed in the results).
TEST(SchedulerSimulation, ACaughtTurncoatThatLiesSometimesLeavesNothingBehind) {
  SimulateChurn({.replication = 2,
                 .adaptive = true,
                 .rogue_every = 5,
                 .turncoat_every = 10,
                 .turncoat_lies_every = 3});
}

}  // namespace
}  // namespace claw

namespace claw {
namespace {

PlannedJob PlanReplicated(const AppRegistry& apps, uint32_t tasks, int replication, int quorum,
                          int max_replicas) {
  auto p = ParseAndPlanJob(R"({"app":"echo","tasks":)" + std::to_string(tasks) +
                               R"(,"replication":)" + std::to_string(replication) +
                               R"(,"quorum":)" + std::to_string(quorum) +
                               R"(,"max_replicas":)" + std::to_string(max_replicas) + "}",
                           apps);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

class ReplicationTest : public SchedulerTest {
 protected:
  void Connect(const AgentId& a, uint32_t want) {
    sched_.AgentConnected(a, 1e9, {}, clock_.Now());
    sched_.AddDemand(a, want);
  }
  std::map<AgentId, std::vector<Assignment>> DispatchAll() {
    std::map<AgentId, std::vector<Assignment>> out;
    for (auto& aa : sched_.Dispatch(clock_.Now())) out[aa.agent] = aa.assignments;
    return out;
  }
  ResultOutcome ReportOutput(const AgentId& agent, const Assignment& a, std::string output) {
    std::vector<ResultIn> r{{a.lease, std::move(output), 10}};
    return sched_.AcceptResults(agent, r, clock_.Now())[0];
  }
};

TEST_F(ReplicationTest, ReplicasGoToDifferentAgentsAndAgreeingResultsSettle) {
  ASSERT_TRUE(sched_.AddJob("j1", "alice", PlanReplicated(apps_, 4, 2, 2, 4), clock_.Now()).ok());
  Connect("a1", 100);
  Connect("a2", 100);
  auto got = DispatchAll();
  ASSERT_EQ(got["a1"].size(), 4u);
  ASSERT_EQ(got["a2"].size(), 4u);
  std::set<uint32_t> a1_tasks, a2_tasks;
  for (auto& a : got["a1"]) a1_tasks.insert(a.index);
  for (auto& a : got["a2"]) a2_tasks.insert(a.index);
  EXPECT_EQ(a1_tasks.size(), 4u) << "one replica per agent";
  EXPECT_EQ(a2_tasks.size(), 4u);
  for (auto& a : got["a1"]) EXPECT_EQ(Report("a1", a), ResultOutcome::kAccepted);
  EXPECT_EQ(sched_.GetJob("j1")->done, 0u) << "one result is not a quorum";
  for (auto& a : got["a2"]) EXPECT_EQ(Report("a2", a), ResultOutcome::kAccepted);
  auto job = sched_.GetJob("j1");
  EXPECT_EQ(job->record.state, JobState::kDone);
  EXPECT_EQ(job->record.result_json, R"({"n":4})");
  EXPECT_EQ(sched_.ReputationOf("a1").valid, 4u);
  EXPECT_EQ(sched_.ReputationOf("a2").invalid, 0u);
  EXPECT_LT(sched_.ReputationOf("a2").error_rate, 0.1);
}

TEST_F(ReplicationTest, ADisagreementGetsATieBreakerAndTheOddOneOutIsJudgedInvalid) {
  ASSERT_TRUE(sched_.AddJob("j1", "alice", PlanReplicated(apps_, 1, 2, 2, 4), clock_.Now()).ok());
  Connect("honest", 1);
  Connect("liar", 1);
  auto got = DispatchAll();
  ASSERT_EQ(got["honest"].size(), 1u);
  ASSERT_EQ(got["liar"].size(), 1u);
  EXPECT_EQ(ReportOutput("liar", got["liar"][0], "42"), ResultOutcome::kAccepted);
  EXPECT_EQ(Report("honest", got["honest"][0]), ResultOutcome::kAccepted);
  // No quorum: one more replica, which neither of them may run.
  EXPECT_EQ(sched_.GetJob("j1")->record.state, JobState::kRunning);
  sched_.AddDemand("honest", 1);
  sched_.AddDemand("liar", 1);
  EXPECT_TRUE(DispatchAll().empty());
  Connect("third", 1);
  auto third = DispatchAll();
  ASSERT_EQ(third["third"].size(), 1u);
  EXPECT_EQ(Report("third", third["third"][0]), ResultOutcome::kAccepted);
  auto job = sched_.GetJob("j1");
  EXPECT_EQ(job->record.state, JobState::kDone);
  EXPECT_EQ(job->record.result_json, R"({"n":1})");  // the liar's "42" did not enter the merge
  EXPECT_EQ(sched_.ReputationOf("liar").invalid, 1u);
  EXPECT_NEAR(sched_.ReputationOf("liar").error_rate, 0.2, 1e-12);
  EXPECT_EQ(sched_.ReputationOf("honest").valid, 1u);
  EXPECT_EQ(sched_.ReputationOf("third").valid, 1u);
  auto batch = sched_.TakeBatch();
  EXPECT_EQ(batch.verdicts.size(), 3u);
  EXPECT_EQ(batch.reputations.size(), 3u);
}

// Two answers that differ and no third agent: the job says why it waits,
// and fails after its quorum_wait, not never. An agent that could break the
// tie, while connected, keeps it waiting.
TEST_F(ReplicationTest, ATieWithNoAgentToBreakItFailsAfterTheQuorumWait) {
  auto planned = ParseAndPlanJob(
      R"({"app":"echo","tasks":1,"replication":2,"quorum":2,"quorum_wait_s":30})", apps_);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  ASSERT_TRUE(sched_.AddJob("j1", "alice", std::move(planned).value(), clock_.Now()).ok());
  Connect("a1", 1);
  Connect("a2", 1);
  auto got = DispatchAll();
  EXPECT_EQ(ReportOutput("a1", got["a1"][0], "1"), ResultOutcome::kAccepted);
  EXPECT_EQ(ReportOutput("a2", got["a2"][0], "2"), ResultOutcome::kAccepted);
  auto waiting = sched_.GetJob("j1")->waiting;
  EXPECT_NE(waiting.find("task 0 needs another agent: its 2 answers differ"), std::string::npos)
      << waiting;
  // A third agent is connected for a while (busy elsewhere): the wait restarts.
  sched_.AgentConnected("a3", 1e9, {}, clock_.Now());
  clock_.Advance(seconds(25));
  sched_.Tick(clock_.Now());
  EXPECT_TRUE(sched_.GetJob("j1")->waiting.empty()) << "a3 could break the tie";
  sched_.AgentDisconnected("a3", clock_.Now());
  clock_.Advance(seconds(25));
  sched_.Tick(clock_.Now());
  EXPECT_EQ(sched_.GetJob("j1")->record.state, JobState::kRunning) << "25 s without one";
  clock_.Advance(seconds(6));
  sched_.Tick(clock_.Now());
  auto job = sched_.GetJob("j1");
  EXPECT_EQ(job->record.state, JobState::kFailed);
  EXPECT_NE(job->record.error.find("no quorum among 2 results"), std::string::npos)
      << job->record.error;
  EXPECT_NE(job->record.error.find("connected for 30 s"), std::string::npos) << job->record.error;
  EXPECT_NE(job->record.error.find("they differ in their values"), std::string::npos)
      << job->record.error;
}

TEST_F(ReplicationTest, NoQuorumWithinMaxReplicasFailsTheJobWithTheReason) {
  ASSERT_TRUE(sched_.AddJob("j1", "alice", PlanReplicated(apps_, 1, 2, 2, 2), clock_.Now()).ok());
  Connect("a1", 1);
  Connect("a2", 1);
  auto got = DispatchAll();
  EXPECT_EQ(ReportOutput("a1", got["a1"][0], "x"), ResultOutcome::kAccepted);
  EXPECT_EQ(ReportOutput("a2", got["a2"][0], "y"), ResultOutcome::kAccepted);
  auto job = sched_.GetJob("j1");
  EXPECT_EQ(job->record.state, JobState::kFailed);
  EXPECT_NE(job->record.error.find("no quorum among 2 results"), std::string::npos)
      << job->record.error;
}

TEST_F(ReplicationTest, ALoneAgentNeverRunsTwoReplicasOfOneTask) {
  ASSERT_TRUE(sched_.AddJob("j1", "alice", PlanReplicated(apps_, 3, 3, 2, 5), clock_.Now()).ok());
  Connect("a1", 100);
  auto got = DispatchAll();
  std::set<uint32_t> tasks;
  for (auto& a : got["a1"]) tasks.insert(a.index);
  EXPECT_EQ(got["a1"].size(), 3u);
  EXPECT_EQ(tasks.size(), 3u);
  // Its remaining demand is served as soon as there is something it may run.
  Connect("a2", 100);
  EXPECT_EQ(DispatchAll()["a2"].size(), 3u);
}

TEST_F(ReplicationTest, AQuorumOfTwoOutOfThreeCancelsTheReplicaStillRunning) {
  ASSERT_TRUE(sched_.AddJob("j1", "alice", PlanReplicated(apps_, 1, 3, 2, 5), clock_.Now()).ok());
  Connect("a1", 1);
  Connect("a2", 1);
  Connect("slow", 1);
  auto got = DispatchAll();
  ASSERT_EQ(got.size(), 3u);
  sched_.TakeNotices();
  EXPECT_EQ(Report("a1", got["a1"][0]), ResultOutcome::kAccepted);
  EXPECT_EQ(Report("a2", got["a2"][0]), ResultOutcome::kAccepted);
  EXPECT_EQ(sched_.GetJob("j1")->record.state, JobState::kDone);
  auto notices = sched_.TakeNotices();
  ASSERT_EQ(notices.cancels["slow"].size(), 1u);
  EXPECT_EQ(Report("slow", got["slow"][0]), ResultOutcome::kStale);
}

TEST_F(ReplicationTest, PendingVotesSurviveARestart) {
  auto store = NewMemoryStore();
  ASSERT_TRUE(sched_.AddJob("j1", "alice", PlanReplicated(apps_, 1, 2, 2, 4), clock_.Now()).ok());
  Connect("a1", 1);
  Connect("a2", 1);
  auto got = DispatchAll();
  EXPECT_EQ(Report("a1", got["a1"][0]), ResultOutcome::kAccepted);
  ASSERT_TRUE(store->Apply(sched_.TakeBatch()).ok());
  // The coordinator restarts; a2 comes back still holding its replica.
  Scheduler restored(&apps_, Options());
  auto state = store->Load();
  ASSERT_TRUE(state.ok());
  ASSERT_EQ(state->replicas.size(), 1u);
  ASSERT_TRUE(restored.Restore(std::move(state).value(), clock_.Now()).ok());
  EXPECT_TRUE(restored.AgentConnected("a2", 1e9, {got["a2"][0].lease}, clock_.Now()).empty());
  std::vector<ResultIn> r{{got["a2"][0].lease, got["a2"][0].params, 10}};
  EXPECT_EQ(restored.AcceptResults("a2", r, clock_.Now())[0], ResultOutcome::kAccepted);
  EXPECT_EQ(restored.GetJob("j1")->record.state, JobState::kDone);
  EXPECT_EQ(restored.ReputationOf("a1").valid, 1u);
}

}  // namespace
}  // namespace claw

namespace claw {
namespace {

// An agent with a long clean record runs most tasks of an adaptive job alone;
// the job still ends only after a check of its last unchecked answer.
TEST_F(ReplicationTest, ATrustedAgentRunsMostTasksAloneAndIsCheckedBeforeTheJobEnds) {
  ASSERT_TRUE(sched_.AddJob("warmup", "alice", PlanReplicated(apps_, 20, 2, 2, 8), clock_.Now()).ok());
  Connect("veteran", 100);
  Connect("peer", 100);
  for (auto& [agent, list] : DispatchAll()) {
    for (auto& a : list) ASSERT_EQ(Report(agent, a), ResultOutcome::kAccepted);
  }
  ASSERT_EQ(sched_.GetJob("warmup")->record.state, JobState::kDone);
  ASSERT_GE(sched_.ReputationOf("veteran").streak, 20u);
  sched_.AgentDisconnected("peer", clock_.Now());

  // 200 tasks; only the veteran is connected.
  ASSERT_TRUE(sched_.AddJob("j", "alice", PlanReplicated(apps_, 200, 2, 2, 8), clock_.Now()).ok());
  sched_.AddDemand("veteran", 1000);
  size_t runs = 0;
  auto mine = DispatchAll()["veteran"];
  ASSERT_EQ(mine.size(), 200u) << "one replica of each task";
  for (auto& a : mine) {
    ASSERT_EQ(Report("veteran", a), ResultOutcome::kAccepted);
    runs++;
  }
  auto job = sched_.GetJob("j");
  EXPECT_EQ(job->record.state, JobState::kRunning) << "its unchecked answers wait for a check";
  // About 5% were spot-checked: those wait for a second agent.
  EXPECT_GT(job->done, 170u);
  EXPECT_LT(job->done, 200u);
  Connect("peer", 1000);
  while (sched_.GetJob("j")->record.state == JobState::kRunning) {
    auto got = DispatchAll();
    ASSERT_FALSE(got.empty());
    for (auto& [agent, list] : got) {
      for (auto& a : list) {
        ASSERT_EQ(Report(agent, a), ResultOutcome::kAccepted);
        runs++;
      }
    }
  }
  EXPECT_EQ(sched_.GetJob("j")->record.state, JobState::kDone);
  // Spot checks plus one check of the last unchecked answer: far from 2x.
  EXPECT_LT(runs, 200u * 12 / 10) << runs;
  std::printf("200 tasks, adaptive 2/2, one trusted agent: %zu runs (%.2fx)\n", runs, runs / 200.0);
}

}  // namespace
}  // namespace claw

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
  Result<std::string> Run(std::string_view p) const override { return std::string(p); }
  Result<nlohmann::json> Merge(const JobSpec&,
                               const std::vector<std::string_view>& outputs) const override {
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i] != std::to_string(i)) return InvalidArgument("output " + std::to_string(i));
    }
    return nlohmann::json{{"n", outputs.size()}};
  }
  bool Equivalent(std::string_view a, std::string_view b) const override { return a == b; }
};

AppRegistry TestApps() {
  AppRegistry r;
  r.Register(std::make_unique<EchoApp>());
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

// Hours of a churning network in virtual time, with the coordinator crashing
// and recovering from its store now and then: every task completes exactly
// once and every job's merge sees each output in its place.
TEST(SchedulerSimulation, EveryTaskCompletesExactlyOnceUnderChurnAndCrashes) {
  AppRegistry apps = TestApps();
  FakeClock clock;
  auto store = NewMemoryStore();
  SchedulerOptions opts;
  opts.min_lease = seconds(30);
  opts.session_grace = seconds(10);
  auto sched = std::make_unique<Scheduler>(&apps, opts);
  std::mt19937_64 rng(12345);

  constexpr int kJobs = 20, kTasksPerJob = 250, kAgents = 40;
  for (int j = 0; j < kJobs; ++j) {
    ASSERT_TRUE(sched->AddJob("j" + std::to_string(j), "u", Plan(apps, kTasksPerJob, 20),
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
  auto commit = [&] { ASSERT_TRUE(store->Apply(sched->TakeBatch()).ok()); };

  int crashes = 0;
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
        results.push_back({r.a.lease, r.a.params, 1000});
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
    for (auto& [agent, leases] : sched->TakeNotices().cancels) {
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
  for (int j = 0; j < kJobs; ++j) {
    auto job = sched->GetJob("j" + std::to_string(j));
    ASSERT_TRUE(job.has_value());
    EXPECT_EQ(job->record.state, JobState::kDone) << job->record.error;
    done += job->record.state == JobState::kDone;
    EXPECT_EQ(job->record.result_json, R"({"n":250})");
    // Run time is counted once per task (each accepted report says 1 ms),
    // across every crash and restore.
    EXPECT_EQ(job->record.task_runtime_us, uint64_t{kTasksPerJob} * 1000);
  }
  EXPECT_EQ(done, kJobs);
  EXPECT_EQ(accepted.size(), static_cast<size_t>(kJobs * kTasksPerJob));
  for (const auto& [key, n] : accepted) EXPECT_EQ(n, 1) << key.first << "/" << key.second;
  EXPECT_GT(crashes, 0);
  EXPECT_EQ(sched->active_leases(), 0u);
  // Finished jobs come back from the store with their run time.
  Scheduler restored(&apps, opts);
  auto state = store->Load();
  ASSERT_TRUE(state.ok());
  ASSERT_TRUE(restored.Restore(std::move(state).value(), clock.Now()).ok());
  EXPECT_EQ(restored.GetJob("j0")->record.task_runtime_us, uint64_t{kTasksPerJob} * 1000);
}

}  // namespace
}  // namespace claw

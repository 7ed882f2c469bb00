// Quotas by tier (core/quota.h) and what the scheduler does with them:
// held jobs wait with their reason and go on at the month's rollover (the
// injected clock), fair share between users by tier weight.
#include "core/quota.h"

#include <gtest/gtest.h>

#include <map>

#include "common/clock.h"
#include "core/job_spec.h"
#include "core/scheduler.h"

namespace claw {
namespace {

using std::chrono::hours;
using std::chrono::seconds;

Time At(int y, int mo, int d, int h = 0) {
  using namespace std::chrono;
  const sys_days day = year(y) / month(static_cast<unsigned>(mo)) / std::chrono::day(static_cast<unsigned>(d));
  return Time::FromUnixMs(duration_cast<milliseconds>(day.time_since_epoch()).count() +
                          int64_t{h} * 3'600'000);
}

constexpr uint64_t kHourUs = 3'600'000'000;

TEST(Months, AreUtcCalendarMonths) {
  EXPECT_EQ(UtcMonth(At(2026, 11, 30, 23)), 202611);
  EXPECT_EQ(UtcMonth(At(2026, 12, 1)), 202612);
  EXPECT_EQ(UtcMonth(StartOfNextMonth(202612)), 202701);
  EXPECT_EQ(StartOfNextMonth(202611).us, At(2026, 12, 1).us);
  EXPECT_EQ(UtcMonth(At(2028, 2, 29, 12)), 202802);
}

TEST(QuotaBook, WarnsAtEightyPercentHoldsAtTheLimitAndReleasesNextMonth) {
  QuotaBook book;
  book.Load(202611, {}, {{"ann", "free"}, {"ent", "enterprise"}});
  const Time now = At(2026, 11, 10);
  std::vector<UsageCharge> c = {{"ann", 79 * kHourUs}, {"ent", 5000 * kHourUs}};
  EXPECT_TRUE(book.Charge(c, now).empty());
  c = {{"ann", 2 * kHourUs}};
  auto events = book.Charge(c, now);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, QuotaEvent::kWarned);
  EXPECT_FALSE(book.HeldReason("ann"));
  c = {{"ann", 19 * kHourUs}};
  events = book.Charge(c, now);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, QuotaEvent::kHeld);
  auto why = book.HeldReason("ann");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("ann used 100 of 100 node-hours in 2026-11 (free tier); held until 2026-12-01"),
            std::string::npos)
      << *why;
  EXPECT_FALSE(book.HeldReason("ent")) << "enterprise is unlimited";
  EXPECT_TRUE(book.Roll(At(2026, 11, 30, 23)).empty());
  events = book.Roll(At(2026, 12, 1));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, QuotaEvent::kReleased);
  EXPECT_FALSE(book.HeldReason("ann"));
  EXPECT_EQ(book.month(), 202612);
  for (const UserUsage& u : book.Usage()) EXPECT_EQ(u.used_hours, 0) << u.user;
}

TEST(QuotaBook, AStoredMonthHoldsAtLoadAndANewTierReleases) {
  QuotaBook book;
  book.Load(202611, {{"ann", 150 * kHourUs}}, {{"ann", "free"}});
  EXPECT_TRUE(book.HeldReason("ann"));
  auto events = book.SetTier("ann", "researcher");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, QuotaEvent::kReleased);
  EXPECT_DOUBLE_EQ(book.Weight("ann"), 2);
  events = book.SetTier("ann", "free");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, QuotaEvent::kHeld);
}

class EchoApp final : public App {
 public:
  std::string_view Name() const override { return "echo"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override {
    std::vector<TaskSpec> t;
    for (uint32_t i = 0; i < spec.tasks; ++i) t.push_back({std::to_string(i), 1e6});
    return t;
  }
  Result<std::string> Run(std::string_view p, const RunContext&) const override {
    return std::string(p);
  }
  Result<nlohmann::json> Merge(const JobSpec&, const std::vector<std::string_view>& o) const override {
    return nlohmann::json{{"n", o.size()}};
  }
  bool Equivalent(std::string_view, std::string_view a, std::string_view b) const override {
    return a == b;
  }
};

class HoldTest : public ::testing::Test {
 protected:
  HoldTest() : sched_(&apps_, SchedulerOptions{}) { apps_.Register(std::make_unique<EchoApp>()); }
  void Submit(const JobId& id, const std::string& owner, uint32_t tasks) {
    auto p = ParseAndPlanJob(R"({"app":"echo","tasks":)" + std::to_string(tasks) + "}", apps_);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE(sched_.AddJob(id, owner, std::move(p).value(), clock_.Now()).ok());
  }
  // Who got the tasks one agent asking for `n` was given.
  std::map<std::string, int> Dispatch(uint32_t n) {
    sched_.AgentConnected("a", 1e9, {}, clock_.Now());
    sched_.AddDemand("a", n);
    std::map<std::string, int> out;
    for (auto& aa : sched_.Dispatch(clock_.Now())) {
      for (auto& a : aa.assignments) out[a.job]++;
    }
    return out;
  }
  FakeClock clock_;
  AppRegistry apps_;
  Scheduler sched_;
};

TEST_F(HoldTest, AHeldUsersJobsWaitWithTheReasonAndGoOnWhenReleased) {
  Submit("ann-1", "ann", 4);
  Submit("bob-1", "bob", 4);
  sched_.HoldOwner("ann", "over quota: ann used 100 of 100 node-hours");
  EXPECT_EQ(sched_.GetJob("ann-1")->waiting, "held: over quota: ann used 100 of 100 node-hours");
  EXPECT_EQ(sched_.GetJob("bob-1")->waiting.find("held"), std::string::npos);
  auto got = Dispatch(8);
  EXPECT_EQ(got["bob-1"], 4);
  EXPECT_EQ(got.count("ann-1"), 0u);
  EXPECT_EQ(sched_.GetJob("ann-1")->record.state, JobState::kRunning) << "held, never dropped";
  sched_.HoldOwner("ann", "");
  EXPECT_EQ(sched_.GetJob("ann-1")->waiting, "");
  EXPECT_EQ(Dispatch(8)["ann-1"], 4);
}

TEST_F(HoldTest, SettledTasksChargeTheirOwnerTheRunTimeOfEveryResult) {
  Submit("ann-1", "ann", 2);
  sched_.AgentConnected("a", 1e9, {}, clock_.Now());
  sched_.AddDemand("a", 2);
  for (auto& aa : sched_.Dispatch(clock_.Now())) {
    std::vector<ResultIn> r;
    for (auto& a : aa.assignments) r.push_back({a.lease, a.params, 1'500'000});
    sched_.AcceptResults("a", r, clock_.Now());
  }
  uint64_t ann = 0;
  for (const UsageCharge& c : sched_.TakeBatch().usage) {
    EXPECT_EQ(c.user, "ann");
    ann += c.node_us;
  }
  EXPECT_EQ(ann, 3'000'000u);
}

TEST_F(HoldTest, FairShareGivesEachUserWorkInProportionToTheirWeight) {
  // Two users with long queues, one with twice the weight: over many
  // dispatches the heavier one gets about twice the work, whoever came first.
  Submit("ann-1", "ann", 3000);
  Submit("bob-1", "bob", 3000);
  sched_.SetOwnerWeight("ann", 1);
  sched_.SetOwnerWeight("bob", 2);
  std::map<std::string, int> total;
  for (int round = 0; round < 60; ++round) {
    for (auto& [job, n] : Dispatch(32)) total[job] += n;
    // Finish what was handed out, so the agent asks again.
    std::vector<ResultIn> none;
    sched_.AgentDisconnected("a", clock_.Now());
    clock_.Advance(seconds(1));
  }
  const double ratio = static_cast<double>(total["bob-1"]) / std::max(1, total["ann-1"]);
  EXPECT_GT(total["ann-1"], 0);
  EXPECT_NEAR(ratio, 2.0, 0.3) << total["ann-1"] << " vs " << total["bob-1"];
}

}  // namespace
}  // namespace claw

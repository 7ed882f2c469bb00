// Credit (core/credits.h): BOINC's recent average, claims bounded by the
// app's estimate, the lowest claim in a quorum, nothing for a lost vote.
#include "core/credits.h"

#include <gtest/gtest.h>

#include <map>

#include "common/clock.h"
#include "core/credit_stats.h"
#include "core/job_spec.h"
#include "core/scheduler.h"

namespace claw {
namespace {

using std::chrono::seconds;

// Values computed with BOINC's update_average (lib/util.cpp) for these inputs.
TEST(RecentAverage, FollowsBoincUpdateAverage) {
  RecentAverage first;
  UpdateRecentAverage(first, 1086400, 1000000, 100);
  EXPECT_DOUBLE_EQ(first.average, 100.0);  // 100 credits in one day
  RecentAverage next{100, 1000000};
  UpdateRecentAverage(next, 1086400, 0, 200);
  EXPECT_NEAR(next.average, 109.42763357360933, 1e-9);
  RecentAverage idle{100, 1000000};
  UpdateRecentAverage(idle, 1604800, 0, 0);  // one half-life
  EXPECT_NEAR(idle.average, 50.0, 1e-9);
  RecentAverage same{100, 1000000};
  UpdateRecentAverage(same, 1000000, 0, 10);  // no time passed: the limit
  EXPECT_NEAR(same.average, 100.99021025794278, 1e-9);
  EXPECT_NEAR(DecayedAverage(RecentAverage{100, 1000000}, 1000000 + 2 * 604800.0), 25.0, 1e-9);
  RecentAverage quick;  // a first result of one second: a day's work, not 86,400 times it
  UpdateRecentAverage(quick, 1000001, 1000000, 1);
  EXPECT_DOUBLE_EQ(quick.average, 1.0);
}

TEST(RecentAverage, ADeviceReturningTheSameCreditEveryDaySettlesAtIt) {
  RecentAverage rac;
  double t = 1e9;
  UpdateRecentAverage(rac, t, t - 86400, 100);
  for (int day = 0; day < 60; ++day) {
    t += 86400;
    UpdateRecentAverage(rac, t, 0, 100);
  }
  EXPECT_NEAR(rac.average, 100.0, 0.5);
}

TEST(Claims, AreBoundedAndAQuorumPaysItsLowest) {
  EXPECT_DOUBLE_EQ(ClaimedFlop(1e9, 2'000'000, 1e12), 2e9);
  EXPECT_DOUBLE_EQ(ClaimedFlop(1e9, 2'000'000'000, 1e12), 1e12);  // the bound
  EXPECT_DOUBLE_EQ(ClaimedFlop(-5, 2'000'000, 1e12), 0);
  const double claims[] = {3, 1, 2};
  EXPECT_DOUBLE_EQ(QuorumClaim(claims), 1);
  EXPECT_DOUBLE_EQ(QuorumClaim({}), 0);
}

// ---- the scheduler grants ---------------------------------------------------

// Each task's output is its index; `cost` FLOP each.
class CostApp final : public App {
 public:
  std::string_view Name() const override { return "cost"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override {
    std::vector<TaskSpec> t;
    for (uint32_t i = 0; i < (spec.tasks ? spec.tasks : 1); ++i) {
      t.push_back({std::to_string(i), kCost});
    }
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
  static constexpr double kCost = 4.32e12;  // 10 credits of work
};

class CreditGrantTest : public ::testing::Test {
 protected:
  CreditGrantTest() : sched_(&apps_, SchedulerOptions{}) {
    apps_.Register(std::make_unique<CostApp>());
  }
  void Submit(const std::string& extra) {
    auto p = ParseAndPlanJob(R"({"app":"cost","tasks":1)" + extra + "}", apps_);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE(sched_.AddJob("j", "alice", std::move(p).value(), clock_.Now()).ok());
  }
  void Connect(const AgentId& a, double flops) {
    sched_.AgentConnected(a, flops, {}, clock_.Now());
    sched_.AddDemand(a, 1);
  }
  // Runs the one task's replica on `a`, which says `output` took `seconds`.
  void Run(const AgentId& a, const std::string& output, double seconds_taken) {
    for (auto& aa : sched_.Dispatch(clock_.Now())) held_[aa.agent] = aa.assignments;
    auto it = held_.find(a);
    ASSERT_TRUE(it != held_.end() && it->second.size() == 1) << "no task for " << a;
    std::vector<ResultIn> r{{it->second[0].lease, output, static_cast<uint64_t>(seconds_taken * 1e6)}};
    held_.erase(it);
    ASSERT_EQ(sched_.AcceptResults(a, r, clock_.Now())[0], ResultOutcome::kAccepted);
  }
  std::map<AgentId, double> Granted() {
    std::map<AgentId, double> out;
    for (const CreditGrant& g : sched_.TakeBatch().credits) out[g.agent] += g.credit;
    return out;
  }

  FakeClock clock_;
  AppRegistry apps_;
  Scheduler sched_;
  std::map<AgentId, std::vector<Assignment>> held_;  // dispatched, not yet run
};

TEST_F(CreditGrantTest, AResultEarnsFlopsTimesRunTime) {
  Submit("");
  Connect("a", 1e9);
  Run("a", "0", 216);  // 2.16e11 FLOP: half a credit
  auto g = Granted();
  ASSERT_EQ(g.size(), 1u);
  EXPECT_NEAR(g["a"], 0.5, 1e-12);
}

TEST_F(CreditGrantTest, ReportingTenTimesTheRunTimeEarnsNoMoreThanTheBound) {
  Submit("");
  Connect("a", 1e9);
  // The task is 4.32e12 FLOP (10 credits): 4,320 s on this device. It says
  // it took ten times that.
  Run("a", "0", 43'200);
  auto g = Granted();
  const double bound = 10 * SchedulerOptions{}.credit.bound_factor;
  EXPECT_NEAR(g["a"], bound, 1e-9);
  EXPECT_LT(g["a"], 100);  // what ten times the run time would have claimed
}

TEST_F(CreditGrantTest, InAQuorumEveryValidResultEarnsTheLowestClaim) {
  Submit(R"(,"replication":2,"quorum":2,"max_replicas":2)");
  Connect("honest", 1e9);
  Connect("inflated", 1e10);  // says it is ten times as fast, and slow too
  Run("honest", "0", 432);    // 1 credit
  Run("inflated", "0", 4320);
  auto g = Granted();
  ASSERT_EQ(g.size(), 2u);
  EXPECT_NEAR(g["honest"], 1.0, 1e-12);
  EXPECT_NEAR(g["inflated"], 1.0, 1e-12);
}

TEST_F(CreditGrantTest, AResultThatLosesTheVoteEarnsNothing) {
  Submit(R"(,"replication":2,"quorum":2,"max_replicas":3)");
  Connect("honest", 1e9);
  Connect("liar", 1e9);
  Run("liar", "42", 432);
  Run("honest", "0", 432);
  EXPECT_TRUE(Granted().empty()) << "no quorum yet, no credit";
  Connect("third", 1e9);
  Run("third", "0", 864);
  auto g = Granted();
  EXPECT_EQ(g.count("liar"), 0u);
  EXPECT_NEAR(g["honest"], 1.0, 1e-12);
  EXPECT_NEAR(g["third"], 1.0, 1e-12);
}

TEST(CreditBook, KeepsTotalsPerAgentAndDayAndTakesBackRevokedCredit) {
  CreditBook book;
  const Time day1 = Time::FromUnixMs(int64_t{20000} * 86'400'000 + 3'600'000);
  std::vector<CreditGrant> grants = {{"j", 0, "a", "alice", 2.0, 1'000'000},
                                     {"j", 1, "a", "alice", 3.0, 1'000'000},
                                     {"j", 0, "b", "bob", 1.0, 1'000'000}};
  CreditChanges c = book.Apply(grants, day1);
  EXPECT_DOUBLE_EQ(c.accounts["a"].total, 5.0);
  EXPECT_EQ(c.accounts["a"].results, 2u);
  EXPECT_EQ(c.accounts["a"].owner, "alice");
  EXPECT_DOUBLE_EQ((c.days[{20000, "a"}]), 5.0);
  EXPECT_DOUBLE_EQ((c.days[{20000, "b"}]), 1.0);
  std::vector<CreditGrant> revoked = {{"j", 1, "a", "alice", -3.0, 1'000'000}};
  c = book.Apply(revoked, day1 + seconds(86400));
  EXPECT_DOUBLE_EQ(c.accounts["a"].total, 2.0);
  EXPECT_EQ(c.accounts["a"].results, 1u);
  EXPECT_DOUBLE_EQ((c.days[{20001, "a"}]), -3.0);
  EXPECT_EQ(c.accounts.count("b"), 0u) << "only what changed";
}

TEST(CreditStats, RanksUsersAndDevicesAndExportsAsBoincDoes) {
  std::map<AgentId, CreditAccount> accounts;
  accounts["a1"] = {"alice", 10, 4, {1.5, 0}};
  accounts["a2"] = {"alice", 5, 2, {0.5, 0}};
  accounts["b1"] = {"bob", 20, 9, {3, 0}};
  accounts["c1"] = {"<carol & co>", 1, 1, {0.1, 0}};
  CreditStats s = BuildCreditStats(accounts, 7);
  ASSERT_EQ(s.users.size(), 3u);
  EXPECT_EQ(s.users[0].name, "bob");
  EXPECT_EQ(s.users[1].name, "alice");
  EXPECT_DOUBLE_EQ(s.users[1].total, 15);
  EXPECT_EQ(s.users[1].devices, 2u);
  EXPECT_EQ(s.users[1].rank, 2u);
  EXPECT_DOUBLE_EQ(s.users[0].percentile, 100);
  EXPECT_DOUBLE_EQ(s.users[2].percentile, 0);
  EXPECT_EQ(s.devices[0].id, "b1");
  std::string xml = UsersXml(s);
  EXPECT_NE(xml.find("<name>&lt;carol &amp; co&gt;</name>"), std::string::npos) << xml;
  EXPECT_NE(xml.find("<total_credit>15.000000</total_credit>"), std::string::npos);
  EXPECT_NE(HostsXml(s).find("<id>b1</id>"), std::string::npos);
  EXPECT_EQ(CreditStatsJson(s)["ledger_size"], 7);
}

}  // namespace
}  // namespace claw

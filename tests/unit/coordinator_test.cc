// The coordinator with its real in-memory store, a fake clock, and fake
// transports (a session sink and a job watcher that record what they get).
#include "coordinator/coordinator.h"

#include <gtest/gtest.h>

#include "apps/registry.h"
#include "common/crypto.h"
#include "protocol/signing.h"

namespace claw {
namespace {

using std::chrono::milliseconds;

const UserRecord kAlice{"alice", "researcher", "", Time{}};

class RecordingSink final : public SessionSink {
 public:
  void Send(const v1::CoordinatorMessage& msg) override { sent.push_back(msg); }
  void Close(const Status& why) override { closed = why; }
  std::vector<LeaseId> TakeAssignments() {
    std::vector<LeaseId> out;
    for (const auto& m : sent) {
      for (const auto& a : m.assignments()) out.push_back(a.lease_id());
    }
    sent.clear();
    return out;
  }
  std::vector<v1::CoordinatorMessage> sent;
  std::optional<Status> closed;
};

class RecordingWatcher final : public JobWatcher {
 public:
  void OnJob(const v1::JobInfo& info) override { updates.push_back(info); }
  std::vector<v1::JobInfo> updates;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = NewMemoryStore();
    CoordinatorOptions options;
    options.signing_key = coordinator_key_.secret_key;
    auto c = Coordinator::Create(store_.get(), &apps_, &clock_, options, NullLogger());
    ASSERT_TRUE(c.ok());
    coordinator_ = std::move(c).value();
  }
  // Enrolls an agent and opens its session on `sink`.
  AgentId Connect(RecordingSink* sink) {
    auto tokens = coordinator_->CreateEnrollTokens(1, std::chrono::hours(1));
    KeyPair key = GenerateSigningKey();
    v1::EnrollRequest req;
    req.set_token((*tokens)[0]);
    req.set_public_key(key.public_key);
    auto enrolled = coordinator_->Enroll(req);
    EXPECT_TRUE(enrolled.ok()) << enrolled.status().ToString();
    v1::Hello hello;
    hello.set_agent_id(enrolled->agent_id());
    hello.set_unix_ms(clock_.Now().unix_ms());
    hello.set_signature(Sign("claw-session-v1|" + hello.agent_id() + "|" +
                                 std::to_string(hello.unix_ms()),
                             key.secret_key));
    EXPECT_EQ(enrolled->coordinator_key(), coordinator_key_.public_key);
    auto id = coordinator_->OpenSession(hello, sink);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    agents_[sink] = {*id, key};
    return *id;
  }
  void Want(RecordingSink* sink, uint32_t n) {
    v1::AgentMessage m;
    m.set_want(n);
    coordinator_->OnAgentMessage(sink, m);
  }
  static v1::AgentMessage ResultMessage(LeaseId lease) {
    v1::AgentMessage m;
    auto* r = m.add_results();
    r->set_lease_id(lease);
    r->set_runtime_us(250);
    return m;
  }
  void Report(RecordingSink* sink, LeaseId lease) {
    v1::AgentMessage m = ResultMessage(lease);
    SignReports(agents_[sink].first, agents_[sink].second.secret_key, &m);
    coordinator_->OnAgentMessage(sink, m);
  }
  int DoneTasksInStore() {
    auto state = store_->Load();
    int done = 0;
    for (const auto& t : state->tasks) done += t.state == TaskState::kDone;
    return done;
  }

  KeyPair coordinator_key_ = GenerateSigningKey();
  std::map<SessionSink*, std::pair<AgentId, KeyPair>> agents_;
  FakeClock clock_;
  AppRegistry apps_ = BuiltinApps();
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(CoordinatorTest, WatchersGetProgressAtMostOncePerIntervalAndTheEndAtOnce) {
  RecordingSink sink;
  Connect(&sink);
  auto job = coordinator_->Submit(R"({"app":"noop","tasks":20})", kAlice);
  ASSERT_TRUE(job.ok());
  RecordingWatcher watcher;
  ASSERT_TRUE(coordinator_->Watch(*job, kAlice, &watcher).ok());
  ASSERT_EQ(watcher.updates.size(), 1u);  // the current state, at once
  Want(&sink, 20);
  std::vector<LeaseId> leases = sink.TakeAssignments();
  ASSERT_EQ(leases.size(), 20u);

  // Ten results within one interval: one update, then the rest wait.
  for (int i = 0; i < 10; ++i) Report(&sink, leases[i]);
  EXPECT_EQ(watcher.updates.size(), 2u);
  coordinator_->Tick();
  EXPECT_EQ(watcher.updates.size(), 2u);  // still within the interval
  clock_.Advance(milliseconds(60));
  coordinator_->Tick();  // the held-back progress goes out now
  ASSERT_EQ(watcher.updates.size(), 3u);
  EXPECT_EQ(watcher.updates.back().tasks_done(), 10u);

  // The last result ends the job: sent at once, inside the interval.
  for (int i = 10; i < 20; ++i) Report(&sink, leases[i]);
  ASSERT_EQ(watcher.updates.size(), 4u);
  EXPECT_EQ(watcher.updates.back().state(), "done");
  EXPECT_EQ(watcher.updates.back().tasks_done(), 20u);
  EXPECT_DOUBLE_EQ(watcher.updates.back().task_seconds(), 20 * 250e-6);
  coordinator_->Unwatch(&watcher);
}

TEST_F(CoordinatorTest, EveryResultIsAcknowledgedOnlyAfterItIsStored) {
  RecordingSink sink;
  Connect(&sink);
  ASSERT_TRUE(coordinator_->Submit(R"({"app":"noop","tasks":3})", kAlice).ok());
  Want(&sink, 3);
  std::vector<LeaseId> leases = sink.TakeAssignments();
  ASSERT_EQ(leases.size(), 3u);
  Report(&sink, leases[0]);
  ASSERT_EQ(sink.sent.size(), 1u);
  ASSERT_EQ(sink.sent[0].ack_size(), 1);
  EXPECT_EQ(sink.sent[0].ack(0), leases[0]);
  auto state = store_->Load();
  ASSERT_TRUE(state.ok());
  int done = 0;
  for (const auto& t : state->tasks) done += t.state == TaskState::kDone;
  EXPECT_EQ(done, 1);
  EXPECT_EQ(coordinator_->Metrics().results_accepted, 1u);
}

}  // namespace
}  // namespace claw

namespace claw {
namespace {

TEST_F(CoordinatorTest, VotesShowInTheAgentsReputation) {
  RecordingSink s1, s2;
  Connect(&s1);
  Connect(&s2);
  ASSERT_TRUE(coordinator_->Submit(R"({"app":"noop","tasks":1,"replication":2})", kAlice).ok());
  Want(&s1, 1);
  Want(&s2, 1);
  std::vector<LeaseId> l1 = s1.TakeAssignments(), l2 = s2.TakeAssignments();
  ASSERT_EQ(l1.size(), 1u);
  ASSERT_EQ(l2.size(), 1u);
  Report(&s1, l1[0]);
  Report(&s2, l2[0]);
  auto agents = coordinator_->ListAgents();
  ASSERT_TRUE(agents.ok());
  ASSERT_EQ(agents->size(), 2u);
  for (const auto& a : *agents) {
    EXPECT_TRUE(a.connected());
    EXPECT_EQ(a.valid_results(), 1u) << a.agent_id();
    EXPECT_EQ(a.invalid_results(), 0u);
    EXPECT_FALSE(a.on_probation());
  }
  EXPECT_EQ(coordinator_->Metrics().results_valid, 2u);
}

}  // namespace
}  // namespace claw

namespace claw {
namespace {

TEST_F(CoordinatorTest, AssignmentsAreSignedForTheirAgentOnly) {
  RecordingSink sink;
  AgentId id = Connect(&sink);
  ASSERT_TRUE(coordinator_->Submit(R"({"app":"noop","tasks":3})", kAlice).ok());
  Want(&sink, 3);
  const v1::CoordinatorMessage* with = nullptr;
  for (const auto& m : sink.sent) {
    if (m.assignments_size() > 0) with = &m;
  }
  ASSERT_NE(with, nullptr);
  EXPECT_TRUE(AssignmentsVerify(id, coordinator_key_.public_key, *with));
  EXPECT_FALSE(AssignmentsVerify("a-someone-else", coordinator_key_.public_key, *with));
  v1::CoordinatorMessage altered = *with;
  altered.mutable_assignments(0)->set_params("rm -rf /");
  EXPECT_FALSE(AssignmentsVerify(id, coordinator_key_.public_key, altered));
}

TEST_F(CoordinatorTest, ForgedOrUnsignedResultsAreRejectedAndChangeNothing) {
  RecordingSink honest, forger;
  Connect(&honest);
  Connect(&forger);
  ASSERT_TRUE(coordinator_->Submit(R"({"app":"noop","tasks":2})", kAlice).ok());
  Want(&forger, 2);
  std::vector<LeaseId> leases = forger.TakeAssignments();
  ASSERT_EQ(leases.size(), 2u);

  v1::AgentMessage unsigned_msg = ResultMessage(leases[0]);
  coordinator_->OnAgentMessage(&forger, unsigned_msg);
  ASSERT_TRUE(forger.closed.has_value());
  EXPECT_EQ(forger.closed->code(), StatusCode::kPermissionDenied);
  EXPECT_NE(forger.closed->message().find("signature"), std::string::npos);

  // Signed with another agent's key.
  RecordingSink again;
  Connect(&again);
  v1::AgentMessage forged = ResultMessage(leases[1]);
  SignReports(agents_[&again].first, agents_[&honest].second.secret_key, &forged);
  coordinator_->OnAgentMessage(&again, forged);
  ASSERT_TRUE(again.closed.has_value());
  EXPECT_EQ(again.closed->code(), StatusCode::kPermissionDenied);

  EXPECT_EQ(DoneTasksInStore(), 0);
  EXPECT_EQ(coordinator_->Metrics().results_accepted, 0u);
}

}  // namespace
}  // namespace claw

namespace claw {
namespace {

TEST_F(CoordinatorTest, UsersSeeAndCancelOnlyTheirOwnJobs) {
  auto alice_token = coordinator_->AddUser("alice", "researcher");
  auto bob_token = coordinator_->AddUser("bob", "free");
  ASSERT_TRUE(alice_token.ok() && bob_token.ok());
  EXPECT_EQ(coordinator_->AddUser("alice", "free").status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(coordinator_->AddUser("Bad Name", "free").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->AddUser("carol", "gold").status().code(), StatusCode::kInvalidArgument);
  auto alice = coordinator_->Authenticate(*alice_token);
  auto bob = coordinator_->Authenticate(*bob_token);
  ASSERT_TRUE(alice.ok() && bob.ok());
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(coordinator_->Authenticate("cu-forged").status().code(),
            StatusCode::kUnauthenticated);
  EXPECT_EQ(coordinator_->Authenticate("").status().code(), StatusCode::kUnauthenticated);

  auto job = coordinator_->Submit(R"({"app":"noop","tasks":2})", *alice);
  ASSERT_TRUE(job.ok());
  EXPECT_TRUE(coordinator_->GetJob(*job, *alice).ok());
  // To bob it does not exist.
  EXPECT_EQ(coordinator_->GetJob(*job, *bob).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(coordinator_->Cancel(*job, *bob).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(coordinator_->GetResults(*job, *bob).status().code(), StatusCode::kNotFound);
  RecordingWatcher watcher;
  EXPECT_EQ(coordinator_->Watch(*job, *bob, &watcher).code(), StatusCode::kNotFound);
  EXPECT_TRUE(coordinator_->ListJobs(10, *bob).empty());
  EXPECT_EQ(coordinator_->ListJobs(10, *alice).size(), 1u);
  EXPECT_EQ(coordinator_->ListJobs(10, LocalUser()).size(), 1u);  // an admin sees all
  EXPECT_EQ(coordinator_->GetJob(*job, *alice)->state(), "running");
  EXPECT_TRUE(coordinator_->Cancel(*job, *alice).ok());
}

}  // namespace
}  // namespace claw

namespace claw {
namespace {

// Quotas end to end in the coordinator, on the injected clock: a free user
// over their (tiny) quota has their job held with the reason, an attempt by
// a non-admin to lift it changes nothing, and the month's rollover lets the
// job finish.
TEST_F(CoordinatorTest, AJobOverQuotaIsHeldNotDroppedAndGoesOnNextMonth) {
  coordinator_.reset();
  store_ = NewMemoryStore();
  CoordinatorOptions options;
  options.signing_key = coordinator_key_.secret_key;
  options.quota.tiers["free"].node_hours = 400e-6 / 3600;  // 400 µs of run time a month
  clock_.Set(Time::FromUnixMs(int64_t{1796079600} * 1000));  // 2026-11-30 23:00 UTC
  auto c = Coordinator::Create(store_.get(), &apps_, &clock_, options, NullLogger());
  ASSERT_TRUE(c.ok());
  coordinator_ = std::move(c).value();
  auto bob_token = coordinator_->AddUser("bob", "free");
  ASSERT_TRUE(bob_token.ok());
  auto bob = *coordinator_->Authenticate(*bob_token);

  RecordingSink sink;
  Connect(&sink);
  auto job = coordinator_->Submit(R"({"app":"noop","tasks":6})", bob);
  ASSERT_TRUE(job.ok());
  Want(&sink, 2);
  std::vector<LeaseId> first = sink.TakeAssignments();
  ASSERT_EQ(first.size(), 2u);
  for (LeaseId l : first) Report(&sink, l);  // 2 × 250 µs: past 400 µs
  Want(&sink, 4);
  EXPECT_TRUE(sink.TakeAssignments().empty()) << "held: nothing more is dispatched";
  auto info = coordinator_->GetJob(*job, bob);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), "running");
  EXPECT_EQ(info->waiting().rfind("held: over quota: bob used", 0), 0u) << info->waiting();
  EXPECT_NE(info->waiting().find("held until 2026-12-01"), std::string::npos) << info->waiting();
  auto usage = coordinator_->Usage(bob);
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_TRUE(usage[0].held);
  EXPECT_EQ(store_->MonthUsage(202611)->at("bob"), 500u);

  // bob may not move himself to another tier; nothing changes.
  EXPECT_EQ(coordinator_->SetTier("bob", "enterprise", bob).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(coordinator_->Usage(bob)[0].held);
  EXPECT_EQ(coordinator_->SetTier("bob", "gold", LocalUser()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->SetTier("nobody", "free", LocalUser()).code(), StatusCode::kNotFound);

  clock_.Advance(std::chrono::hours(1));  // December: the first to look (here `claw usage`,
  EXPECT_FALSE(coordinator_->Usage(bob)[0].held);  // before any tick) releases bob
  coordinator_->Tick();
  std::vector<LeaseId> rest = sink.TakeAssignments();  // the demand still open
  Want(&sink, 4);
  for (LeaseId l : sink.TakeAssignments()) rest.push_back(l);
  ASSERT_EQ(rest.size(), 4u);
  for (LeaseId l : rest) Report(&sink, l);
  EXPECT_EQ(coordinator_->GetJob(*job, bob)->state(), "done");
  EXPECT_EQ(store_->MonthUsage(202612)->at("bob"), 1000u);
}

}  // namespace
}  // namespace claw

// One conformance suite, run against every Store implementation.
#include "store/store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <sqlite3.h>

#include <filesystem>

namespace claw {
namespace {

struct StoreFactory {
  std::string name;
  std::function<std::unique_ptr<Store>(const std::string& dir)> make;
};
void PrintTo(const StoreFactory& f, std::ostream* os) { *os << f.name; }

class StoreConformance : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("claw-store-" + std::to_string(getpid()) + "-" + GetParam().name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    store_ = GetParam().make(dir_.string());
    ASSERT_TRUE(store_);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  static StoreBatch NewJobBatch(const std::string& id, uint32_t tasks) {
    StoreBatch b;
    NewJob nj;
    nj.job = JobRecord{id, "alice", R"({"app":"noop"})", JobState::kRunning, Time{5}, Time{}, tasks};
    for (uint32_t i = 0; i < tasks; ++i) {
      nj.tasks.push_back(TaskRecord{id, i, "p" + std::to_string(i), 2.5});
    }
    b.new_jobs.push_back(nj);
    return b;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreConformance, AppliesBatchesAndLoadsThemBack) {
  ASSERT_TRUE(store_->Apply(NewJobBatch("j1", 3)).ok());
  StoreBatch b;
  b.leases_granted.push_back(LeaseRecord{7, "j1", 0, "a1", Time{100}});
  b.leases_granted.push_back(LeaseRecord{8, "j1", 1, "a1", Time{200}});
  b.next_lease_id = 9;
  ASSERT_TRUE(store_->Apply(b).ok());
  StoreBatch done;
  done.leases_ended.push_back(7);
  done.task_updates.push_back(TaskUpdate{"j1", 0, TaskState::kDone, 1, std::string("\0x", 2), 42});
  ASSERT_TRUE(store_->Apply(done).ok());

  auto s = store_->Load();
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->jobs.size(), 1u);
  EXPECT_EQ(s->jobs[0].owner, "alice");
  EXPECT_EQ(s->jobs[0].n_tasks, 3u);
  ASSERT_EQ(s->tasks.size(), 3u);
  auto t0 = std::find_if(s->tasks.begin(), s->tasks.end(), [](auto& t) { return t.index == 0; });
  EXPECT_EQ(t0->state, TaskState::kDone);
  EXPECT_EQ(t0->output, std::string("\0x", 2));  // binary-safe
  EXPECT_EQ(t0->runtime_us, 42u);
  EXPECT_EQ(t0->params, "p0");
  ASSERT_EQ(s->leases.size(), 1u);
  EXPECT_EQ(s->leases[0].id, 8u);
  EXPECT_EQ(s->leases[0].deadline, Time{200});
  EXPECT_EQ(s->next_lease_id, 9u);
}

TEST_P(StoreConformance, TasksAddedToARunningJobAreStoredWithItsNewCount) {
  ASSERT_TRUE(store_->Apply(NewJobBatch("j1", 1)).ok());
  StoreBatch b;
  TaskRecord added{"j1", 1, "promoted", 5e6};
  b.tasks_added.push_back(added);
  // The same batch may already lease it.
  b.task_updates.push_back(TaskUpdate{"j1", 1, TaskState::kLeased, 0, "", 0, 1});
  JobUpdate grown{"j1"};
  grown.n_tasks = 2;
  b.job_updates.push_back(grown);
  ASSERT_TRUE(store_->Apply(b).ok());
  auto s = store_->Load();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->jobs[0].n_tasks, 2u);
  ASSERT_EQ(s->tasks.size(), 2u);
  auto t1 = std::find_if(s->tasks.begin(), s->tasks.end(), [](auto& t) { return t.index == 1; });
  EXPECT_EQ(t1->params, "promoted");
  EXPECT_EQ(t1->state, TaskState::kLeased);
  // A later update without a count leaves it.
  StoreBatch later;
  later.job_updates.push_back(JobUpdate{"j1", JobState::kRunning});
  ASSERT_TRUE(store_->Apply(later).ok());
  EXPECT_EQ(store_->Load()->jobs[0].n_tasks, 2u);
}

TEST_P(StoreConformance, FinishedJobsKeepRecordsButNotTasksInLoad) {
  ASSERT_TRUE(store_->Apply(NewJobBatch("j1", 2)).ok());
  StoreBatch b;
  b.job_updates.push_back(JobUpdate{"j1", JobState::kDone, Time{9}, R"({"x":1})", "", 1234});
  ASSERT_TRUE(store_->Apply(b).ok());
  auto s = store_->Load();
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->jobs.size(), 1u);
  EXPECT_EQ(s->jobs[0].state, JobState::kDone);
  EXPECT_EQ(s->jobs[0].result_json, R"({"x":1})");
  EXPECT_EQ(s->jobs[0].task_runtime_us, 1234u);
  EXPECT_TRUE(s->tasks.empty());
}

TEST_P(StoreConformance, TrainingRoundsComeBackInOrderAndAPutAgainReplaces) {
  RoundRecord r2{"j1", 2, "m2", "s2", "e2", "u2", R"({"round":2})", Time{20}};
  RoundRecord r0{"j1", 0, "m0", "", "", "", R"({"round":0})", Time{1}};
  RoundRecord other{"j10", 0, "x", "", "", "", "{}", Time{3}};
  for (const auto* r : {&r2, &r0, &other}) ASSERT_TRUE(store_->PutRound(*r, {}).ok());
  r2.info_json = R"({"round":2,"again":true})";  // aggregated again after a restart
  ASSERT_TRUE(store_->PutRound(r2, {}).ok());
  auto rounds = store_->Rounds("j1");
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 2u);
  EXPECT_EQ((*rounds)[0].round, 0u);
  EXPECT_EQ((*rounds)[0].model, "m0");
  EXPECT_EQ((*rounds)[1].update, "u2");
  EXPECT_EQ((*rounds)[1].info_json, r2.info_json);
  EXPECT_EQ((*rounds)[1].finished, Time{20});
  EXPECT_TRUE(store_->Rounds("j2")->empty());
}

TEST_P(StoreConformance, AFailedBatchChangesNothing) {
  ASSERT_TRUE(store_->Apply(NewJobBatch("j1", 2)).ok());
  StoreBatch bad = NewJobBatch("j1", 1);  // duplicate job id
  bad.leases_granted.push_back(LeaseRecord{1, "j1", 0, "a1", Time{1}});
  EXPECT_FALSE(store_->Apply(bad).ok());
  auto s = store_->Load();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->tasks.size(), 2u);
  EXPECT_TRUE(s->leases.empty());
}

TEST_P(StoreConformance, EnrollmentTokensAreOneTimeAndExpire) {
  ASSERT_TRUE(store_->AddEnrollTokens({"h1", "h2"}, Time{1000}, "").ok());
  EXPECT_TRUE(*store_->EnrollTokenUsable("h1", Time{10}));
  AgentRecord a{"a1", "key", "{}", Time{10}};
  EXPECT_TRUE(store_->EnrollAgent("h1", a, Time{10}).ok());
  EXPECT_FALSE(*store_->EnrollTokenUsable("h1", Time{10})) << "used";
  EXPECT_FALSE(*store_->EnrollTokenUsable("nope", Time{10})) << "unknown";
  EXPECT_TRUE(*store_->EnrollTokenUsable("h2", Time{1000}));
  EXPECT_FALSE(*store_->EnrollTokenUsable("h2", Time{1001})) << "expired";
  AgentRecord b{"a2", "key2", "{}", Time{10}};
  EXPECT_EQ(store_->EnrollAgent("h1", b, Time{10}).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(store_->EnrollAgent("nope", b, Time{10}).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(store_->EnrollAgent("h2", b, Time{2000}).code(), StatusCode::kPermissionDenied);
  auto got = store_->GetAgent("a1");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->public_key, "key");
  EXPECT_EQ(store_->GetAgent("a2").status().code(), StatusCode::kNotFound);
}

TEST_P(StoreConformance, AgentsBelongToTheOwnerOfTheirToken) {
  ASSERT_TRUE(store_->AddEnrollTokens({"mine"}, Time{1000}, "alice").ok());
  ASSERT_TRUE(store_->AddEnrollTokens({"file"}, Time{1000}, "").ok());
  AgentRecord a{"a1", "key", "{}", Time{10}};
  a.owner = "mallory";  // ignored: the token decides
  ASSERT_TRUE(store_->EnrollAgent("mine", a, Time{10}).ok());
  ASSERT_TRUE(store_->EnrollAgent("file", AgentRecord{"a2", "k2", "{}", Time{10}}, Time{10}).ok());
  EXPECT_EQ(store_->GetAgent("a1")->owner, "alice");
  EXPECT_EQ(store_->GetAgent("a2")->owner, "");
  auto all = store_->ListAgents();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].owner, "alice");
}

TEST_P(StoreConformance, BlobOwnersAreRecordedDirectlyAndWithJobResults) {
  EXPECT_FALSE(*store_->IsBlobOwner({"h1", "alice"}));
  ASSERT_TRUE(store_->AddBlobOwner({"h1", "alice"}).ok());
  ASSERT_TRUE(store_->AddBlobOwner({"h1", "alice"}).ok());  // idempotent
  EXPECT_TRUE(*store_->IsBlobOwner({"h1", "alice"}));
  EXPECT_FALSE(*store_->IsBlobOwner({"h1", "bob"}));
  StoreBatch b;
  b.blob_owners.push_back({"h2", "bob"});
  ASSERT_TRUE(store_->Apply(b).ok());
  EXPECT_TRUE(*store_->IsBlobOwner({"h2", "bob"}));
}

TEST_P(StoreConformance, HistoryKeepsSamplesInOrderAndDropsThoseOlderThanAsked) {
  for (int i = 1; i <= 5; ++i) {
    HistorySample h;
    h.t = Time{i * 1'000'000};
    h.working = static_cast<uint32_t>(i);
    h.flops = i * 1e9;
    h.tasks_per_s = i / 2.0;
    h.queue = static_cast<uint64_t>(10 * i);
    ASSERT_TRUE(store_->AddHistory(h, Time{2'000'000}).ok());  // keeps t >= 2 s
  }
  auto all = store_->History(Time{0});
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ(all->front().t.us, 2'000'000);
  EXPECT_EQ(all->back().working, 5u);
  EXPECT_DOUBLE_EQ(all->back().flops, 5e9);
  EXPECT_DOUBLE_EQ(all->back().tasks_per_s, 2.5);
  EXPECT_EQ(all->back().queue, 50u);
  auto recent = store_->History(Time{4'000'000});
  ASSERT_TRUE(recent.ok());
  EXPECT_EQ(recent->size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(
    All, StoreConformance,
    ::testing::Values(StoreFactory{"memory", [](const std::string&) { return NewMemoryStore(); }},
                      StoreFactory{"sqlite",
                                   [](const std::string& dir) {
                                     auto s = OpenSqliteStore(dir + "/claw.db");
                                     EXPECT_TRUE(s.ok()) << s.status().ToString();
                                     return s.ok() ? std::move(s).value() : nullptr;
                                   }}),
    [](const auto& info) { return info.param.name; });

TEST(SqliteStore, SecondOpenOfTheSameDatabaseIsRefused) {
  auto dir = std::filesystem::temp_directory_path() / ("claw-lock-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "claw.db").string();
  auto first = OpenSqliteStore(path);
  ASSERT_TRUE(first.ok());
  auto second = OpenSqliteStore(path);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use by another coordinator"), std::string::npos);
  first->reset();
  EXPECT_TRUE(OpenSqliteStore(path).ok());  // released with the first
  std::filesystem::remove_all(dir);
}

TEST(SqliteStore, SurvivesReopen) {
  auto dir = std::filesystem::temp_directory_path() / ("claw-reopen-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "claw.db").string();
  {
    auto s = OpenSqliteStore(path);
    ASSERT_TRUE(s.ok());
    StoreBatch b;
    b.new_jobs.push_back(NewJob{JobRecord{"j", "o", "{}", JobState::kRunning, Time{1}, Time{}, 1},
                                {TaskRecord{"j", 0, "p", 1}}});
    ASSERT_TRUE((*s)->Apply(b).ok());
  }
  auto s = OpenSqliteStore(path);
  ASSERT_TRUE(s.ok());
  auto state = (*s)->Load();
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->jobs.size(), 1u);
  EXPECT_EQ(state->tasks.size(), 1u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace claw

namespace claw {
namespace {

// A database written by the first release (schema version 1) is upgraded in
// place and keeps its jobs.
TEST(SqliteStore, UpgradesASchemaVersion1Database) {
  auto dir = std::filesystem::temp_directory_path() / ("claw-migrate-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string path = (dir / "claw.db").string();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* v1 = R"sql(
      CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
      CREATE TABLE jobs (
        id TEXT PRIMARY KEY, owner TEXT NOT NULL, spec TEXT NOT NULL, state INTEGER NOT NULL,
        created_us INTEGER NOT NULL, finished_us INTEGER NOT NULL, n_tasks INTEGER NOT NULL,
        result TEXT NOT NULL, error TEXT NOT NULL);
      CREATE TABLE tasks (
        job TEXT NOT NULL, idx INTEGER NOT NULL, params BLOB NOT NULL, cost REAL NOT NULL,
        state INTEGER NOT NULL, attempts INTEGER NOT NULL, output BLOB NOT NULL,
        runtime_us INTEGER NOT NULL, PRIMARY KEY (job, idx)) WITHOUT ROWID;
      CREATE TABLE leases (
        id INTEGER PRIMARY KEY, job TEXT NOT NULL, idx INTEGER NOT NULL, agent TEXT NOT NULL,
        deadline_us INTEGER NOT NULL);
      CREATE TABLE agents (id TEXT PRIMARY KEY, public_key BLOB NOT NULL, device TEXT NOT NULL,
        enrolled_us INTEGER NOT NULL);
      CREATE TABLE enroll_tokens (hash TEXT PRIMARY KEY, expires_us INTEGER NOT NULL,
        used_by TEXT NOT NULL DEFAULT '');
      INSERT INTO meta VALUES ('schema_version', '1'), ('next_lease_id', '5');
      INSERT INTO agents VALUES ('a-old', x'00', '{}', 1);
      INSERT INTO jobs VALUES ('j-old', 'bob', '{"app":"noop"}', 1, 1, 2, 3, '{}', '');
    )sql";
    ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = OpenSqliteStore(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto s = (*store)->Load();
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->jobs.size(), 1u);
  EXPECT_EQ(s->jobs[0].id, "j-old");
  EXPECT_EQ(s->jobs[0].task_runtime_us, 0u);
  EXPECT_EQ(s->next_lease_id, 5u);
  auto agent = (*store)->GetAgent("a-old");
  ASSERT_TRUE(agent.ok());
  EXPECT_EQ(agent->reputation.valid, 0u);
  store->reset();
  std::filesystem::remove_all(dir);
}

TEST(SqliteStore, RefusesADatabaseFromANewerVersion) {
  auto dir = std::filesystem::temp_directory_path() / ("claw-newer-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string path = (dir / "claw.db").string();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                           "INSERT INTO meta VALUES ('schema_version', '99');",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = OpenSqliteStore(path);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("schema version 99"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace claw

namespace claw {
namespace {

class UserStore : public ::testing::TestWithParam<std::string> {};

TEST_P(UserStore, UsersAreFoundByTokenHashAndNamesAreUnique) {
  auto dir = std::filesystem::temp_directory_path() / ("claw-users-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::unique_ptr<Store> store =
      GetParam() == "memory" ? NewMemoryStore() : std::move(OpenSqliteStore((dir / "c.db").string()).value());
  ASSERT_TRUE(store->AddUser(UserRecord{"alice", "researcher", "h-alice", Time{1}}).ok());
  EXPECT_EQ(store->AddUser(UserRecord{"alice", "free", "h-other", Time{2}}).code(),
            StatusCode::kAlreadyExists);
  auto found = store->FindUserByToken("h-alice");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->name, "alice");
  EXPECT_EQ(found->tier, "researcher");
  EXPECT_EQ(store->FindUserByToken("h-other").status().code(), StatusCode::kNotFound);
  store.reset();
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(All, UserStore, ::testing::Values("memory", "sqlite"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace claw

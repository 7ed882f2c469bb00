// Credit and the open ledger end to end: real agents earn credit for
// validated results, `claw credits` shows it, and `claw ledger verify`,
// from outside over HTTP, accepts the honest log and catches an entry
// changed or removed in the coordinator's database.
#include <httplib.h>

#include <filesystem>

#include "tests/integration/harness.h"

namespace claw::testing {
namespace {

class LedgerTest : public Network {
 protected:
  std::string http() const { return "http://127.0.0.1:" + std::to_string(http_port_); }
  std::string state() const { return (dir_ / "ledger-state.json").string(); }
  int Verify(std::string* out, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--http", http(), "ledger", "verify", "--state", state()};
    args.insert(args.end(), extra.begin(), extra.end());
    return Claw(args, out);
  }
  void RunReplicatedJob(Client& client, uint32_t tasks) {
    auto id = client.Submit(R"({"app":"montecarlo","tasks":)" + std::to_string(tasks) +
                            R"(,"replication":2,"quorum":2,"params":{"model":"pi","paths":2000000}})");
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    auto end = WaitForJobEnd(client, *id);
    ASSERT_EQ(end.state(), "done") << end.error() << coordinator_->Tail();
  }
  int Sqlite(const std::string& sql) {
    Process p({data() + "/claw.db", sql}, (dir_ / "sqlite.log").string(), "/usr/bin/sqlite3");
    return p.Wait();
  }
  // Starts a coordinator on the data that must refuse to start; its exit code.
  int RefusedStart(std::string* out) {
    std::filesystem::remove(data() + "/coordinator.json");
    Process p({"coordinator", "--data", data(), "--port", std::to_string(port_), "--http-port",
               std::to_string(http_port_), "--insecure-local"},
              (dir_ / "refused.log").string());
    const bool exited = p.Exited(std::chrono::seconds(20));
    *out = p.Output();
    return exited ? p.exit_code() : 0;
  }
  void Restart() {
    coordinator_->Stop();
    std::filesystem::remove(data() + "/coordinator.json");
    StartCoordinator();
  }
};

TEST_F(LedgerTest, CreditIsRecordedAndAnyRewriteIsCaughtFromOutside) {
  StartCoordinator();
  StartAgent();
  StartAgent();
  Client client(target());
  RunReplicatedJob(client, 4);

  std::string out;
  ASSERT_EQ(Claw({"--http", http(), "credits", "--devices"}, &out), 0) << out;
  EXPECT_NE(out.find("RANK"), std::string::npos) << out;
  EXPECT_EQ(out.find("no credit granted yet"), std::string::npos) << out;
  ASSERT_EQ(Claw({"--http", http(), "credits", "--json"}, &out), 0) << out;
  auto stats = nlohmann::json::parse(out);
  ASSERT_EQ(stats["devices"].size(), 2u) << out;
  // Both replicas of each task agreed: both devices earned the same.
  EXPECT_GT(stats["devices"][0]["total_credit"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(stats["devices"][0]["total_credit"].get<double>(),
                   stats["devices"][1]["total_credit"].get<double>());
  EXPECT_EQ(stats["devices"][0]["results"], 4);
  const uint64_t size = stats["ledger_size"];
  ASSERT_GE(size, 2u);

  ASSERT_EQ(Verify(&out), 0) << out;
  EXPECT_NE(out.find("trusting the ledger key"), std::string::npos) << out;
  EXPECT_NE(out.find("signature OK"), std::string::npos) << out;
  EXPECT_NE(out.find("they make the signed root: OK"), std::string::npos) << out;
  ASSERT_EQ(Verify(&out, {"--entry", "1"}), 0) << out;
  EXPECT_NE(out.find("included in the signed log: OK"), std::string::npos) << out;
  EXPECT_NE(out.find("\"type\":\"credit\""), std::string::npos) << out;

  // The log grows; the next check proves it only grew, across a restart.
  RunReplicatedJob(client, 2);
  Restart();
  ASSERT_EQ(Verify(&out), 0) << out;
  EXPECT_NE(out.find("consistent with the checkpoint seen before"), std::string::npos) << out;

  // Someone with the database rewrites an entry the outsider has seen. The
  // coordinator itself refuses to serve that history...
  Restart();
  coordinator_->Stop();
  ASSERT_EQ(Sqlite("UPDATE ledger SET entry = replace(entry, '\"results\":', '\"results\":1') "
                   "WHERE idx = 0"),
            0);
  EXPECT_NE(RefusedStart(&out), 0);
  EXPECT_NE(out.find("do not make the root of the checkpoint signed"), std::string::npos) << out;
  // ... and when whoever changed it also wipes what the coordinator
  // remembers, the outsider still catches it.
  ASSERT_EQ(Sqlite("DELETE FROM meta WHERE key = 'ledger_checkpoint'"), 0);
  std::filesystem::remove(data() + "/coordinator.json");
  StartCoordinator();
  EXPECT_NE(Verify(&out), 0) << out;
  EXPECT_NE(out.find("does not extend the one seen before"), std::string::npos) << out;
  // One entry checked alone against the new checkpoint still passes its
  // inclusion proof (it is in the rewritten log), but the state's check
  // against what was seen before fails first.
  EXPECT_NE(Verify(&out, {"--entry", "0"}), 0) << out;

  // ... or removes the last one.
  coordinator_->Stop();
  ASSERT_EQ(Sqlite("UPDATE ledger SET entry = replace(entry, '\"results\":1', '\"results\":') "
                   "WHERE idx = 0; DELETE FROM ledger WHERE idx = (SELECT MAX(idx) FROM ledger)"),
            0);
  EXPECT_NE(RefusedStart(&out), 0);
  EXPECT_NE(out.find("entries were removed"), std::string::npos) << out;
  ASSERT_EQ(Sqlite("DELETE FROM meta WHERE key = 'ledger_checkpoint'"), 0);
  std::filesystem::remove(data() + "/coordinator.json");
  StartCoordinator();
  EXPECT_NE(Verify(&out), 0) << out;
  EXPECT_NE(out.find("the log shrank"), std::string::npos) << out;

  // A verifier pinned to another key refuses the checkpoint.
  ASSERT_EQ(Claw({"--http", http(), "ledger", "verify", "--state", (dir_ / "other.json").string(),
                  "--key", "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"},
                 &out) != 0,
            true);
  EXPECT_NE(out.find("no signature by 'PeterNeumann'"), std::string::npos) << out;
}

TEST_F(LedgerTest, TheOpenEndpointsRefuseBadRangesWithTheReason) {
  StartCoordinator();
  std::string out;
  ASSERT_EQ(Claw({"--http", http(), "ledger", "checkpoint"}, &out), 0) << out;
  EXPECT_NE(out.find("\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n"), std::string::npos)
      << "the empty log's root: " << out;
  httplib::Client h("127.0.0.1", http_port_);
  auto r = h.Get("/ledger/entries?start=0&end=5");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("the log holds [0, 0)"), std::string::npos) << r->body;
  r = h.Get("/ledger/proof/inclusion?index=x&size=1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("index: a non-negative integer"), std::string::npos) << r->body;
  r = h.Get("/ledger/proof/consistency?from=3&to=1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  r = h.Get("/stats/nothing.csv");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  r = h.Get("/stats/users.xml");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "<users>\n</users>\n");
}

}  // namespace
}  // namespace claw::testing

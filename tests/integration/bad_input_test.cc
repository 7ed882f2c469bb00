// Bad input over every entry point gets a clear error and changes nothing.
#include <httplib.h>

#include "harness.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

class BadInput : public Network {
 protected:
  void SetUp() override {
    Network::SetUp();
    StartCoordinator();
    http_ = std::make_unique<httplib::Client>("127.0.0.1", http_port_);
  }
  // POSTs a spec; expects `code` and an error message containing `needle`.
  void ExpectRejected(const std::string& body, int code, const std::string& needle) {
    auto res = http_->Post("/api/jobs", body, "application/json");
    ASSERT_TRUE(res) << "no HTTP response";
    EXPECT_EQ(res->status, code) << res->body;
    auto j = nlohmann::json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << res->body;
    std::string msg = j["error"]["message"];
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
  size_t JobCount() {
    auto res = http_->Get("/api/jobs");
    return res ? nlohmann::json::parse(res->body)["jobs"].size() : 999;
  }
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(BadInput, HttpRejectsBadSpecsNamingTheProblemAndStoresNothing) {
  auto ok = http_->Post("/api/jobs", R"({"app":"noop","tasks":3})", "application/json");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 201) << ok->body;
  ExpectRejected("{\"app\": \"noop\", ", 400, "malformed JSON");
  ExpectRejected(R"({"app":"bitcoin"})", 400, "unknown app 'bitcoin'");
  ExpectRejected(R"({"tasks":3})", 400, "spec.app");
  ExpectRejected(R"({"app":"montecarlo","params":{"model":"pi"}})", 400, "params.paths");
  ExpectRejected(R"({"app":"montecarlo","params":{"model":"pi","paths":"lots"}})", 400,
                 "params.paths: must be an integer");
  ExpectRejected(R"({"app":"montecarlo","tasks":1,"params":{"model":"pi","paths":1e12}})", 400,
                 "per task");
  ExpectRejected(R"({"app":"montecarlo","params":{"model":"pi","paths":-3}})", 400,
                 "params.paths");
  ExpectRejected(R"({"app":"noop","tasks":-1})", 400, "spec.tasks");
  ExpectRejected(std::string(3 << 20, ' '), 413, "larger than");
  EXPECT_EQ(JobCount(), 1u);
}

TEST_F(BadInput, UnknownJobIdIs404AndCancelTwiceIs409) {
  auto res = http_->Get("/api/jobs/j-nope");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_NE(res->body.find("no job 'j-nope'"), std::string::npos);
  res = http_->Post("/api/jobs/j-nope/cancel", "", "application/json");
  EXPECT_EQ(res->status, 404);
  auto made = http_->Post("/api/jobs", R"({"app":"noop","tasks":3})", "application/json");
  std::string id = nlohmann::json::parse(made->body)["job_id"];
  EXPECT_EQ(http_->Post("/api/jobs/" + id + "/cancel", "", "")->status, 200);
  auto again = http_->Post("/api/jobs/" + id + "/cancel", "", "");
  EXPECT_EQ(again->status, 409);
  EXPECT_NE(again->body.find("already ended"), std::string::npos);
  EXPECT_EQ(http_->Get("/no/such/route")->status, 404);
}

TEST_F(BadInput, GrpcRejectsOversizedAndMalformedSpecs) {
  Client client(target(), seconds(10));
  auto big = client.Submit(std::string(20 << 20, 'x'));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted) << big.status().ToString();
  auto bad = client.Submit(R"({"app":"montecarlo","params":{"model":"pi","paths":true}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("params.paths"), std::string::npos);
  auto missing = client.GetJob("j-missing");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto list = client.ListJobs(10);
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty());
}

TEST_F(BadInput, CliExitsNonZeroWithTheError) {
  Process submit({"submit", "--coordinator", target(), "--app", "montecarlo", "-p", "model=pi",
                  "-p", "paths=abc"},
                 (dir_ / "submit.log").string());
  EXPECT_EQ(submit.Wait(), 2);
  EXPECT_NE(submit.Output().find("params.paths"), std::string::npos) << submit.Output();
  Process status({"status", "--coordinator", target(), "j-none"}, (dir_ / "status.log").string());
  EXPECT_EQ(status.Wait(), 2);
  EXPECT_NE(status.Output().find("NOT_FOUND"), std::string::npos) << status.Output();
  Process down({"jobs", "--coordinator", "127.0.0.1:" + std::to_string(FreePort())},
               (dir_ / "down.log").string());
  EXPECT_EQ(down.Wait(), 3);
}

TEST_F(BadInput, EnrollmentWithAWrongTokenIsRefused) {
  Process agent({"agent", "--coordinator", target(), "--state", (dir_ / "rogue").string(),
                 "--token", "ct-forged", "--always"},
                (dir_ / "rogue.log").string());
  ASSERT_TRUE(agent.Exited(seconds(20)));
  EXPECT_NE(agent.exit_code(), 0);
  EXPECT_NE(agent.Output().find("enrollment refused"), std::string::npos) << agent.Output();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "rogue" / "identity.json"));
}

TEST_F(BadInput, EnrollmentTokensAreOneTime) {
  std::string token;
  std::istringstream(ReadFile(data() + "/enroll-tokens")) >> token;
  Process first({"agent", "--coordinator", target(), "--state", (dir_ / "a1").string(), "--token",
                 token, "--always"},
                (dir_ / "a1.log").string());
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(dir_ / "a1" / "identity.json"); },
                      seconds(20)));
  Process second({"agent", "--coordinator", target(), "--state", (dir_ / "a2").string(),
                  "--token", token, "--always"},
                 (dir_ / "a2.log").string());
  ASSERT_TRUE(second.Exited(seconds(20)));
  EXPECT_NE(second.exit_code(), 0);
  EXPECT_NE(second.Output().find("unknown, used or expired"), std::string::npos)
      << second.Output();
}

}  // namespace
}  // namespace claw::testing

// Access to the client API: TLS with a pinned CA, API tokens, per-user
// visibility, admin-only user management, over the CLI (gRPC) and HTTPS,
// against a coordinator without --insecure-local, with a real agent.
#include <httplib.h>

#include "harness.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

class Access : public Network {
 protected:
  // Runs `claw ARGS...`; returns its exit code, with its output in `out`.
  int Claw(std::vector<std::string> args, std::string* out = nullptr) {
    std::string log = (dir_ / ("cli-" + std::to_string(++runs_) + ".log")).string();
    args.insert(args.begin(), {"-c", target(), "--ca", ca_file()});
    Process p(args, log);
    int code = p.Wait();
    if (out) *out = p.Output();
    return code;
  }
  std::string AddUser(const std::string& name, const std::string& tier) {
    std::string out;
    EXPECT_EQ(Claw({"users", "add", name, "--tier", tier, "--data", data()}, &out), 0) << out;
    return out.substr(0, out.find('\n'));
  }
  int runs_ = 0;
};

TEST_F(Access, EveryClientCallNeedsATokenAndUsersSeeOnlyTheirJobs) {
  StartCoordinator({}, /*secure=*/true);
  ASSERT_TRUE(std::filesystem::exists(data() + "/admin-token"));
  std::string alice = AddUser("alice", "researcher");
  std::string bob = AddUser("bob", "free");
  ASSERT_EQ(alice.rfind("cu-", 0), 0u) << alice;

  std::string out;
  // No token, or a wrong one: refused, nothing stored.
  EXPECT_EQ(Claw({"submit", "--app", "noop", "--tasks", "2"}, &out), 2);
  EXPECT_NE(out.find("UNAUTHENTICATED"), std::string::npos) << out;
  EXPECT_EQ(Claw({"--api-token", "cu-forged", "jobs"}, &out), 2);
  EXPECT_NE(out.find("unknown"), std::string::npos) << out;
  // Only the admin adds users.
  EXPECT_EQ(Claw({"--api-token", alice, "users", "add", "mallory"}, &out), 2);
  EXPECT_NE(out.find("admin"), std::string::npos) << out;

  std::string ca = ReadFile(ca_file());
  Client as_alice(target(), seconds(5), alice, ca), as_bob(target(), seconds(5), bob, ca);
  auto job = as_alice.Submit(R"({"app":"noop","tasks":3})");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_TRUE(as_alice.GetJob(*job).ok());
  EXPECT_EQ(as_bob.GetJob(*job).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(as_bob.Cancel(*job).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(as_bob.ListJobs(10)->empty());
  EXPECT_EQ(as_alice.ListJobs(10)->size(), 1u);
  EXPECT_EQ(Claw({"--api-token", bob, "status", *job}, &out), 2);

  // Without the CA, or in plaintext, nothing gets through.
  Client unpinned(target(), seconds(5), alice);
  EXPECT_EQ(unpinned.ListJobs(10).status().code(), StatusCode::kUnavailable);

  // The same over HTTPS.
  httplib::SSLClient http("127.0.0.1", http_port_);
  http.set_ca_cert_path(ca_file().c_str());
  http.enable_server_certificate_verification(true);
  auto res = http.Post("/api/jobs", R"({"app":"noop","tasks":1})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401) << res->body;
  EXPECT_NE(res->body.find("UNAUTHENTICATED"), std::string::npos) << res->body;
  res = http.Get("/api/jobs/" + *job, {{"Authorization", "Bearer " + bob}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = http.Get("/api/jobs/" + *job, {{"Authorization", "Bearer " + alice}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(as_alice.ListJobs(10)->size(), 1u) << "refused calls stored nothing";

  // An agent that pins the CA enrolls over TLS and runs alice's job.
  StartAgent();
  EXPECT_EQ(WaitForJobEnd(as_alice, *job, seconds(60)).state(), "done")
      << ReadFile((dir_ / "agent0.log").string());
}

TEST_F(Access, InsecureLocalIsRefusedOffLoopback) {
  Process p({"coordinator", "--data", data(), "--host", "0.0.0.0", "--port",
             std::to_string(port_), "--http-port", "-1", "--insecure-local"},
            (dir_ / "c.log").string());
  ASSERT_TRUE(p.Exited(seconds(20)));
  EXPECT_NE(p.exit_code(), 0);
  EXPECT_NE(p.Output().find("loopback"), std::string::npos) << p.Output();
}

}  // namespace
}  // namespace claw::testing

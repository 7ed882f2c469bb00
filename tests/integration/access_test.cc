// Access to the client API: TLS with a pinned CA, API tokens, per-user
// visibility, admin-only user management, over the CLI (gRPC) and HTTPS,
// against a coordinator without --insecure-local, with a real agent.
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <fstream>

#include "common/crypto.h"
#include "harness.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

class Access : public Network {
 protected:
  std::string AddUser(const std::string& name, const std::string& tier) {
    std::string out;
    EXPECT_EQ(Claw({"users", "add", name, "--tier", tier, "--data", data()}, &out), 0) << out;
    return out.substr(0, out.find('\n'));
  }
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

TEST_F(Access, BlobsAreReadOnlyByTheirOwnersAndForgedUploadsAreRefused) {
  StartCoordinator({}, /*secure=*/true);
  std::string alice = AddUser("alice", "researcher");
  std::string bob = AddUser("bob", "free");
  std::string ca = ReadFile(ca_file());
  Client as_alice(target(), seconds(5), alice, ca), as_bob(target(), seconds(5), bob, ca);
  Client anonymous(target(), seconds(5), "", ca);
  std::ofstream(dir_ / "secret.txt") << "alice's data";
  auto hash = as_alice.Blobs().UploadFile((dir_ / "secret.txt").string());
  ASSERT_TRUE(hash.ok()) << hash.status().ToString();
  EXPECT_EQ(*hash, Sha256Hex("alice's data"));
  ASSERT_TRUE(as_alice.Blobs().Download(*hash, (dir_ / "back.txt").string()).ok());
  EXPECT_EQ(ReadFile((dir_ / "back.txt").string()), "alice's data");

  // Knowing the hash is not enough: bob can neither read it nor name it.
  EXPECT_EQ(as_bob.Blobs().Download(*hash, (dir_ / "stolen").string()).code(),
            StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "stolen"));
  auto job = as_bob.Submit(R"({"app":"exec","params":{"command":["cat","s"],"inputs":{"s":")" +
                           *hash + R"("}}})");
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument) << job.status().ToString();
  EXPECT_EQ(anonymous.Blobs().Download(*hash, (dir_ / "x").string()).code(),
            StatusCode::kUnauthenticated);

  // An upload whose bytes do not hash to the name it declares stores nothing.
  auto channel = grpc::CreateChannel(target(), grpc::SslCredentials({ca}));
  auto stub = v1::BlobService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + bob);
  v1::BlobInfo info;
  auto writer = stub->PutBlob(&ctx, &info);
  v1::BlobChunk chunk;
  const std::string claimed = Sha256Hex("what bob says it is");
  chunk.set_sha256(claimed);
  chunk.set_size(9);
  chunk.set_data("something");
  writer->Write(chunk);
  writer->WritesDone();
  grpc::Status st = writer->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("does not match"), std::string::npos) << st.error_message();
  EXPECT_FALSE(std::filesystem::exists(data() + "/blobs/" + claimed.substr(0, 2) + "/" + claimed));

  // The same rules over HTTPS, where the ETag names the content.
  httplib::SSLClient http("127.0.0.1", http_port_);
  http.set_ca_cert_path(ca_file().c_str());
  http.enable_server_certificate_verification(true);
  auto res = http.Get("/api/blobs/" + *hash, {{"Authorization", "Bearer " + alice}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "alice's data");
  EXPECT_EQ(res->get_header_value("ETag"), "\"" + *hash + "\"");
  res = http.Get("/api/blobs/" + *hash, {{"Authorization", "Bearer " + bob}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);

  // An agent call signed by a key the coordinator does not know is refused.
  KeyPair stranger = GenerateSigningKey();
  BlobClient forged(channel, AgentBlobAuth("a-000000000000", stranger.secret_key,
                                           SystemClock::Get()));
  EXPECT_EQ(forged.Download(*hash, (dir_ / "y").string()).code(), StatusCode::kPermissionDenied);
}

// Enrolling a device of one's own gives no reach into others' files: an
// agent reads a blob only while it holds a task that names it, and uploads
// only while it holds a task.
TEST_F(Access, AnAgentReadsOnlyTheInputsOfTasksItHolds) {
  StartCoordinator({}, /*secure=*/true);
  std::string alice = AddUser("alice", "researcher");
  std::string bob = AddUser("bob", "free");
  std::string ca = ReadFile(ca_file());
  Client as_alice(target(), seconds(5), alice, ca), as_bob(target(), seconds(5), bob, ca);
  std::ofstream(dir_ / "secret.txt") << "alice's private data";
  auto hash = as_alice.Blobs().UploadFile((dir_ / "secret.txt").string());
  ASSERT_TRUE(hash.ok()) << hash.status().ToString();

  // Bob enrolls a device of his own and signs blob calls with its key.
  auto token = as_bob.CreateEnrollToken(0);
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  StartAgent(1, {}, true, token->token());
  std::string identity_path = (dir_ / "agent0" / "identity.json").string();
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(identity_path); }, seconds(20)))
      << agents_[0]->Output();
  agents_[0]->Kill(SIGTERM);  // Bob's own client from here on
  auto identity = nlohmann::json::parse(ReadFile(identity_path));
  auto secret = FromHex(identity["secret_key"].get<std::string>());
  ASSERT_TRUE(secret.ok());
  auto channel = grpc::CreateChannel(target(), grpc::SslCredentials({ca}));
  BlobClient as_bobs_agent(channel, AgentBlobAuth(identity["agent_id"], *secret,
                                                  SystemClock::Get()));
  Status read = as_bobs_agent.Download(*hash, (dir_ / "stolen").string());
  EXPECT_EQ(read.code(), StatusCode::kNotFound) << read.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "stolen"));
  std::ofstream(dir_ / "junk.bin") << std::string(1000, 'j');
  auto put = as_bobs_agent.UploadFile((dir_ / "junk.bin").string());
  EXPECT_EQ(put.status().code(), StatusCode::kPermissionDenied) << put.status().ToString();
}

// Devices enrolled with a user's token are that user's; two replicas of a
// task never go to one owner's devices, so one person cannot outvote others.
TEST_F(Access, AgentsBelongToTheirEnrollersAndOneOwnerNeverFillsAQuorum) {
  StartCoordinator({}, /*secure=*/true);
  std::string alice = AddUser("alice", "researcher");
  std::string out;
  std::vector<std::string> tokens;
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(Claw({"--api-token", alice, "enroll-token", "--ttl", "600"}, &out), 0) << out;
    tokens.push_back(out.substr(0, out.find('\n')));
    ASSERT_EQ(tokens.back().rfind("ct-", 0), 0u) << out;
  }
  StartAgent(1, {}, true, tokens[0]);
  StartAgent(1, {}, true, tokens[1]);
  StartAgent();  // the operator's token: owner unknown
  std::string ca = ReadFile(ca_file());
  std::string admin_token = ReadFile(data() + "/admin-token");
  Client admin(target(), seconds(5), admin_token.substr(0, admin_token.find('\n')), ca);
  auto job = admin.Submit(R"({"app":"noop","tasks":6,"replication":2,"quorum":2,"adaptive":false})");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(WaitForJobEnd(admin, *job, seconds(60)).state(), "done");
  auto agents = admin.ListAgents();
  ASSERT_TRUE(agents.ok()) << agents.status().ToString();
  ASSERT_EQ(agents->size(), 3u);
  uint64_t alices = 0, others = 0;
  for (const auto& a : *agents) {
    (a.owner() == "alice" ? alices : others) += a.valid_results();
  }
  EXPECT_EQ(alices, 6u) << "each task had exactly one of alice's devices";
  EXPECT_EQ(others, 6u);
  // A used token does not enroll a second device.
  Process& again = StartAgent(1, {}, true, tokens[0]);
  ASSERT_TRUE(again.Exited(seconds(20)));
  EXPECT_NE(again.Output().find("token is unknown, used or expired"), std::string::npos)
      << again.Output();
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

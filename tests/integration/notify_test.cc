// Notifications end to end: a user registers a signed webhook and a Slack
// webhook, both served by a fake HTTP server in this test; a job of theirs
// ends and both are told, the webhook signed as Standard Webhooks says, its
// first attempt refused with a 500 and retried with the same webhook-id.
#include <httplib.h>

#include <mutex>

#include "coordinator/notifier.h"
#include "tests/integration/harness.h"

namespace claw::testing {
namespace {

class Notify : public Network {};

TEST_F(Notify, AJobsEndReachesItsOwnersWebhookSignedAndSlackEscaped) {
  struct Received {
    std::string path, body, id, timestamp, signature;
  };
  std::mutex mu;
  std::vector<Received> got;
  int refused = 0;
  httplib::Server receiver;
  receiver.Post(R"(/(hook|slack))", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lock(mu);
    if (req.path == "/hook" && refused == 0) {  // the first attempt fails
      refused++;
      res.status = 500;
      got.push_back({"refused", req.body, req.get_header_value("webhook-id"), "", ""});
      return;
    }
    got.push_back({req.path, req.body, req.get_header_value("webhook-id"),
                   req.get_header_value("webhook-timestamp"),
                   req.get_header_value("webhook-signature")});
    res.status = 204;
  });
  const int port = receiver.bind_to_any_port("127.0.0.1");
  std::thread serve([&] { receiver.listen_after_bind(); });

  StartCoordinator({"--allow-private-webhooks"});
  StartAgent();
  const std::string http = "http://127.0.0.1:" + std::to_string(http_port_);
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  std::string out;
  ASSERT_EQ(Claw({"--http", http, "notify", "add", "--webhook", base + "/hook"}, &out), 0) << out;
  const size_t at = out.find("whsec_");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string secret = out.substr(at, out.find('\n', at) - at);
  ASSERT_EQ(Claw({"--http", http, "notify", "add", "--slack", base + "/slack"}, &out), 0) << out;
  ASSERT_EQ(Claw({"--http", http, "notify", "list"}, &out), 0) << out;
  EXPECT_NE(out.find("webhook"), std::string::npos) << out;
  EXPECT_NE(out.find("slack"), std::string::npos) << out;

  Client client(target());
  auto id = client.Submit(R"({"app":"noop","tasks":3,"name":"<b>&co"})");
  ASSERT_TRUE(id.ok());
  ASSERT_EQ(WaitForJobEnd(client, *id).state(), "done");
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard lock(mu);
    int hooks = 0, slacks = 0;
    for (const auto& r : got) hooks += r.path == "/hook", slacks += r.path == "/slack";
    return hooks == 1 && slacks == 1;
  }, std::chrono::seconds(20))) << coordinator_->Tail();
  receiver.stop();
  serve.join();

  std::lock_guard lock(mu);
  const Received* hook = nullptr;
  const Received* slack = nullptr;
  const Received* first = nullptr;
  for (const auto& r : got) {
    if (r.path == "/hook") hook = &r;
    if (r.path == "/slack") slack = &r;
    if (r.path == "refused") first = &r;
  }
  ASSERT_TRUE(hook && slack && first);
  EXPECT_EQ(first->id, hook->id) << "a retry keeps its webhook-id";
  EXPECT_EQ(hook->id.rfind("msg_", 0), 0u);
  auto body = nlohmann::json::parse(hook->body);
  EXPECT_EQ(body["type"], "job.done");
  EXPECT_EQ(body["data"]["job"], *id);
  auto expect = StandardWebhookSignature(secret, hook->id, std::stoll(hook->timestamp), hook->body);
  ASSERT_TRUE(expect.ok());
  EXPECT_EQ(hook->signature, *expect);
  auto s = nlohmann::json::parse(slack->body);
  EXPECT_NE(s["text"].get<std::string>().find(*id + " done"), std::string::npos) << slack->body;
  EXPECT_EQ(s["blocks"][0]["text"]["type"], "mrkdwn");
}

TEST_F(Notify, TargetsInsideTheNetworkAreRefusedByDefault) {
  StartCoordinator();
  const std::string http = "http://127.0.0.1:" + std::to_string(http_port_);
  std::string out;
  EXPECT_NE(Claw({"--http", http, "notify", "add", "--webhook",
                  "http://127.0.0.1:" + std::to_string(http_port_) + "/api/jobs"},
                 &out),
            0);
  EXPECT_NE(out.find("loopback, private or link-local"), std::string::npos) << out;
  EXPECT_NE(Claw({"--http", http, "notify", "add", "--webhook",
                  "http://169.254.169.254/latest/meta-data/"},
                 &out),
            0);
  EXPECT_NE(out.find("--allow-private-webhooks"), std::string::npos) << out;
  ASSERT_EQ(Claw({"--http", http, "notify", "list"}, &out), 0) << out;
  EXPECT_EQ(out, "") << "nothing stored";
}

}  // namespace
}  // namespace claw::testing

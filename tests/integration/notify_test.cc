// Notifications end to end: a user registers a signed webhook and a Slack
// webhook, both served by a fake HTTP server in this test; a job of theirs
// ends and both are told, the webhook signed as Standard Webhooks says, its
// first attempt refused with a 500 and retried with the same webhook-id.
#include <httplib.h>

#include <mutex>

#include "coordinator/notifier.h"
#include "tests/integration/harness.h"
#include "tests/requirements.h"

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

// Email: the coordinator's SMTP server (a fake one started here) requires
// STARTTLS; the first delivery is answered "451 try again" and the retry
// carries the same Message-ID. A server that offers no STARTTLS gets
// nothing: the message is never sent in the clear.
TEST_F(Notify, AJobsEndReachesItsOwnerByEmailOverStartTlsAndNeverInTheClear) {
  CLAW_REQUIRE(NeedProgram("/usr/bin/python3", "python3"));
  CLAW_REQUIRE(NeedFile("/usr/lib/python3/dist-packages/aiosmtpd", "python3-aiosmtpd"));
  std::string out;
  ASSERT_EQ(Claw({"coordinator", "init", "--data", data()}, &out), 0) << out;  // its CA and certificate
  const std::filesystem::path mail = dir_ / "mail", clear = dir_ / "clear";
  std::filesystem::create_directories(mail);
  std::filesystem::create_directories(clear);
  const int smtp_port = FreePort(), clear_port = FreePort();
  const std::string fake = std::string(CLAW_SOURCE_DIR) + "/tests/integration/fake_smtp.py";
  Process smtp({fake, std::to_string(smtp_port), mail.string(), "--tls", data() + "/server.pem",
                data() + "/server.key", "--refuse-first"},
               (dir_ / "smtp.log").string(), "/usr/bin/python3");
  Process plain({fake, std::to_string(clear_port), clear.string()}, (dir_ / "clear.log").string(),
                "/usr/bin/python3");
  ASSERT_TRUE(WaitFor([&] {
    return smtp.Output().find("ready") != std::string::npos && plain.Output().find("ready") != std::string::npos;
  }, std::chrono::seconds(20))) << smtp.Output() << plain.Output();

  auto run = [&](int port, const std::string& to) -> std::string {
    coordinator_.reset();
    std::filesystem::remove(data() + "/coordinator.json");  // the last one's
    StartCoordinator({"--smtp", "smtp://127.0.0.1:" + std::to_string(port), "--smtp-from",
                      "compute@example.org", "--smtp-ca", ca_file()});
    const std::string http = "http://127.0.0.1:" + std::to_string(http_port_);
    EXPECT_EQ(Claw({"--http", http, "notify", "add", "--email", to}, &out), 0) << out;
    if (agents_.empty()) StartAgent();
    Client client(target());
    auto id = client.Submit(R"({"app":"noop","tasks":2,"name":"mailed"})");
    EXPECT_TRUE(id.ok());
    EXPECT_EQ(WaitForJobEnd(client, *id).state(), "done");
    return *id;
  };
  const std::string job = run(smtp_port, "alice@example.org");
  ASSERT_TRUE(WaitFor([&] { return std::filesystem::exists(mail / "2.json"); }, std::chrono::seconds(30)))
      << coordinator_->Tail() << smtp.Output();
  auto refused = nlohmann::json::parse(ReadFile((mail / "refused-1.json").string()));
  auto got = nlohmann::json::parse(ReadFile((mail / "2.json").string()));
  EXPECT_EQ(got["from"], "compute@example.org");
  EXPECT_EQ(got["to"], nlohmann::json::array({"alice@example.org"}));
  const std::string text = got["data"];
  EXPECT_NE(text.find("Subject: [OpenClaw] Job " + job + " done"), std::string::npos) << text;
  auto message_id = [](const std::string& t) {
    const size_t at = t.find("Message-ID: <");
    return at == std::string::npos ? std::string() : t.substr(at, t.find('>', at) - at);
  };
  EXPECT_FALSE(message_id(text).empty()) << text;
  EXPECT_EQ(message_id(text), message_id(refused["data"])) << "a retry keeps its Message-ID";

  // No STARTTLS offered: the coordinator gives up rather than send in clear.
  agents_.clear();
  run(clear_port, "bob@example.org");
  // (The output holds the first coordinator's lines too, its 451 among them:
  // wait for this one's refusal itself.)
  ASSERT_TRUE(WaitFor([&] {
    return coordinator_->Output().find("STARTTLS") != std::string::npos;
  }, std::chrono::seconds(30))) << coordinator_->Tail();
  EXPECT_TRUE(std::filesystem::is_empty(clear)) << "a message went out without TLS";

  // A malformed address is refused, naming why; nothing is stored.
  const std::string http = "http://127.0.0.1:" + std::to_string(http_port_);
  EXPECT_NE(Claw({"--http", http, "notify", "add", "--email", "eve@example.org\r\nBcc: x@y.z"}, &out), 0);
  EXPECT_NE(out.find("email address"), std::string::npos) << out;
  smtp.Stop();
  plain.Stop();
}

}  // namespace
}  // namespace claw::testing

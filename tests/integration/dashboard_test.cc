// The dashboard end to end: its live streams (Server-Sent Events) from a
// real coordinator — an update without reconnecting, resuming with
// Last-Event-ID, a client that never reads cut while the coordinator's
// memory stays put, history that survives a restart — the owner's remote
// pause and resume of a device, and every page in headless Chromium
// (tests/browser/dashboard.test.mjs, puppeteer-core).
#include <httplib.h>
#include <sys/resource.h>

#include <mutex>

#include "tests/integration/harness.h"
#include "tests/requirements.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

// Reads one SSE stream on a thread of its own, keeping what arrived.
class SseReader {
 public:
  SseReader(std::function<std::unique_ptr<httplib::Client>()> make, std::string path,
            std::string last_event_id = "", std::string token = "")
      : client_(make()) {
    thread_ = std::thread([this, path, last_event_id, token] {
      httplib::Headers h;
      if (!last_event_id.empty()) h.emplace("Last-Event-ID", last_event_id);
      if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
      auto r = client_->Get(path, h, [&](const char* data, size_t n) {
        std::lock_guard lock(mu_);
        text_.append(data, n);
        return !stop_;
      });
      std::lock_guard lock(mu_);
      ended_ = true;
      status_ = r ? r->status : -1;
    });
  }
  ~SseReader() { Stop(); }
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    client_->stop();
    if (thread_.joinable()) thread_.join();
  }
  std::string Text() {
    std::lock_guard lock(mu_);
    return text_;
  }
  // The `state` events so far: (id, data).
  std::vector<std::pair<std::string, std::string>> States() {
    std::vector<std::pair<std::string, std::string>> out;
    const std::string t = Text();
    for (size_t at = 0; (at = t.find("event: state\n", at)) != std::string::npos;) {
      const size_t id_at = t.rfind("id: ", at);
      const size_t data_at = t.find("data: ", at);
      const size_t end = t.find("\n\n", data_at);
      if (data_at == std::string::npos || end == std::string::npos) break;
      std::string id = id_at == std::string::npos ? "" : t.substr(id_at + 4, t.find('\n', id_at) - id_at - 4);
      out.emplace_back(id, t.substr(data_at + 6, end - data_at - 6));
      at = end;
    }
    return out;
  }
  bool WaitForState(const std::function<bool(const nlohmann::json&)>& pred, seconds limit) {
    return WaitFor([&] {
      for (const auto& [id, data] : States()) {
        auto j = nlohmann::json::parse(data, nullptr, false);
        if (!j.is_discarded() && pred(j)) return true;
      }
      return false;
    }, limit);
  }

 private:
  std::unique_ptr<httplib::Client> client_;
  std::mutex mu_;
  std::string text_;
  bool stop_ = false, ended_ = false;
  int status_ = 0;
  std::thread thread_;
};

bool HasJob(const nlohmann::json& state, const std::string& id) {
  for (const auto& j : state.value("jobs", nlohmann::json::array())) {
    if (j.value("job_id", "") == id) return true;
  }
  return false;
}

long RssKb(pid_t pid) {
  std::istringstream s(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(s, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

class Dashboard : public Network {
 protected:
  std::unique_ptr<httplib::Client> Http() {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", http_port_);
    c->set_read_timeout(60, 0);
    return c;
  }
  std::string AddUser(const std::string& name, const std::string& tier) {
    std::string out;
    EXPECT_EQ(Claw({"users", "add", name, "--tier", tier, "--data", data()}, &out), 0) << out;
    return out.substr(0, out.find('\n'));
  }
  std::string Metric(const std::string& name) {
    auto r = Http()->Get("/metrics");
    if (!r) return "";
    const size_t at = r->body.find("\n" + name + " ");
    if (at == std::string::npos) return "";
    const size_t from = at + name.size() + 2;
    return r->body.substr(from, r->body.find('\n', from) - from);
  }
};

TEST_F(Dashboard, AStreamUpdatesLiveResumesFromLastEventIdAndCutsAClientThatNeverReads) {
  StartCoordinator({"--dashboard-interval", "0.05"});
  Client client(target());
  auto http = [&] { return Http(); };

  // A live update on the same connection: a job submitted after the page opened.
  SseReader jobs(http, "/api/stream?page=jobs");
  ASSERT_TRUE(jobs.WaitForState([](const nlohmann::json& s) { return s.contains("jobs"); }, seconds(10)))
      << jobs.Text();
  auto first = client.Submit(R"({"app":"noop","tasks":2,"name":"first"})");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(jobs.WaitForState([&](const nlohmann::json& s) { return HasJob(s, *first); }, seconds(10)))
      << jobs.Text();
  const std::string last_id = jobs.States().back().first;
  jobs.Stop();

  // Resumed with Last-Event-ID: nothing is sent again while nothing changed...
  SseReader resumed(http, "/api/stream?page=jobs", last_id);
  std::this_thread::sleep_for(seconds(1));
  EXPECT_TRUE(resumed.States().empty()) << resumed.Text();
  EXPECT_NE(resumed.Text().find("retry:"), std::string::npos) << resumed.Text();
  // ...and the next change is.
  auto second = client.Submit(R"({"app":"noop","tasks":2,"name":"second"})");
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(resumed.WaitForState([&](const nlohmann::json& s) { return HasJob(s, *second); },
                                   seconds(10)))
      << resumed.Text();
  resumed.Stop();

  // A client that opens the jobs page and never reads a byte, while the page
  // changes twenty times a second with ~100 KB each time.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(http_port_));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string get = "GET /api/stream?page=jobs HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(write(fd, get.data(), get.size()), static_cast<ssize_t>(get.size()));
  const long rss_before = RssKb(coordinator_->pid());
  const std::string name(120, 'n');
  bool cut = false;
  for (int i = 0; i < 1500 && !cut; ++i) {
    auto id = client.Submit(R"({"app":"noop","tasks":1,"name":")" + name + std::to_string(i % 100) + "\"}");
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (i % 25 == 0) cut = Metric("claw_dashboard_streams_cut_total") == "1";
  }
  const long rss_after = RssKb(coordinator_->pid());
  EXPECT_TRUE(cut) << "the stream was never cut; coordinator log:\n" << coordinator_->Tail();
  EXPECT_NE(coordinator_->Output().find("dashboard stream cut: its client did not read"), std::string::npos);
  // Bounded: the cut stream's buffer (1 MiB) and the jobs themselves, not
  // megabytes per second of events queued for nobody. (Not under
  // AddressSanitizer, whose quarantine keeps up to 256 MB of freed memory:
  // there the process's size says nothing about what it holds.)
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(rss_after - rss_before, 64 * 1024) << rss_before << " KB -> " << rss_after << " KB";
#else
  (void)rss_before, (void)rss_after;
#endif
  close(fd);
  // Everyone else is served as before.
  SseReader after(http, "/api/stream?page=network");
  EXPECT_TRUE(after.WaitForState([](const nlohmann::json& s) { return s.contains("now"); }, seconds(10)));
}

TEST_F(Dashboard, TheNetworksHistorySurvivesARestart) {
  StartCoordinator({"--history-every", "1"});
  auto http = [&] { return Http(); };
  int64_t first_t = 0;
  {
    SseReader net(http, "/api/stream?page=network");
    ASSERT_TRUE(net.WaitForState([](const nlohmann::json& s) {
      return s.contains("history") && s["history"].size() >= 1 && s["now"]["devices"].contains("offline");
    }, seconds(10))) << net.Text();
    for (const auto& [id, data] : net.States()) {
      auto s = nlohmann::json::parse(data);
      if (!s["history"].empty()) {
        first_t = s["history"][0][0].get<int64_t>();
        break;
      }
    }
  }
  std::this_thread::sleep_for(seconds(3));
  coordinator_->Stop();
  std::filesystem::remove(data() + "/coordinator.json");
  StartCoordinator({"--history-every", "1"});
  SseReader net(http, "/api/stream?page=network");
  ASSERT_TRUE(net.WaitForState([&](const nlohmann::json& s) {
    if (!s.value("full_history", false)) return false;
    size_t before_restart = 0;
    for (const auto& row : s["history"]) before_restart += row[0].get<int64_t>() <= first_t + 3000 ? 1 : 0;
    return before_restart >= 2 && s["history"][0][0].get<int64_t>() == first_t;
  }, seconds(10))) << net.Text();
}

TEST_F(Dashboard, AnOwnerPausesAndResumesTheirDeviceRemotelyAndNobodyElseCan) {
  StartCoordinator({"--dashboard-interval", "0.1"}, /*secure=*/true);
  const std::string alice = AddUser("alice", "researcher");
  const std::string bob = AddUser("bob", "free");
  std::string out;
  ASSERT_EQ(Claw({"--api-token", alice, "enroll-token", "--ttl", "600"}, &out), 0) << out;
  StartAgent(1, {}, true, out.substr(0, out.find('\n')));
  httplib::SSLClient api("127.0.0.1", http_port_);
  api.set_ca_cert_path(ca_file());
  auto as = [](const std::string& token) {
    return httplib::Headers{{"Authorization", "Bearer " + token}};
  };
  // POST /api/devices/{device}/control as `token`.
  std::string device;
  auto control = [&](const std::string& token, const std::string& action) {
    return api.Post("/api/devices/" + device + "/control", as(token),
                    nlohmann::json{{"action", action}}.dump(), "application/json");
  };
  ASSERT_TRUE(WaitFor([&] {
    auto r = api.Get("/api/devices", as(alice));
    if (!r || r->status != 200) return false;
    auto j = nlohmann::json::parse(r->body);
    if (j["devices"].empty() || j["devices"][0]["state"] == "offline") return false;
    device = j["devices"][0]["agent_id"];
    return true;
  }, seconds(20)));
  // Bob sees none of alice's devices and may not pause hers.
  auto bobs = api.Get("/api/devices", as(bob));
  ASSERT_TRUE(bobs);
  EXPECT_EQ(nlohmann::json::parse(bobs->body)["devices"].size(), 0u) << bobs->body;
  auto refused = control(bob, "pause");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403) << refused->body;
  auto bad = control(alice, "explode");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  auto state_of = [&]() -> std::string {
    auto r = api.Get("/api/devices", as(alice));
    if (!r || r->status != 200) return "";
    return nlohmann::json::parse(r->body)["devices"][0]["state"];
  };
  ASSERT_EQ(state_of(), "idle") << "before anyone pauses it";
  // A page of a job that is not yours is an error, not a stream.
  auto job = api.Post("/api/jobs", as(alice), R"({"app":"noop","tasks":1})", "application/json");
  ASSERT_TRUE(job && job->status == 201) << (job ? job->body : "");
  const std::string job_id = nlohmann::json::parse(job->body)["job_id"];
  auto peek = api.Get("/api/stream?page=job&job=" + job_id, as(bob));
  ASSERT_TRUE(peek);
  EXPECT_EQ(peek->status, 404) << peek->body;
  // Alice pauses it from the dashboard: the agent itself says so.
  auto paused = control(alice, "pause");
  ASSERT_TRUE(paused);
  ASSERT_EQ(paused->status, 200) << paused->body;
  EXPECT_TRUE(WaitFor([&] { return state_of() == "paused"; }, seconds(15))) << state_of();
  ASSERT_EQ(Claw({"agent", "status", "--state", (dir_ / "agent0").string()}, &out), 0) << out;
  EXPECT_NE(out.find("paused"), std::string::npos) << out;
  auto resumed = control(alice, "resume");
  ASSERT_TRUE(resumed);
  ASSERT_EQ(resumed->status, 200) << resumed->body;
  EXPECT_TRUE(WaitFor([&] { return state_of() == "idle" || state_of() == "working"; }, seconds(15)))
      << state_of();
  // Offline: refused, saying why.
  agents_[0]->Stop();
  ASSERT_TRUE(WaitFor([&] { return state_of() == "offline"; }, seconds(15)));
  auto offline = control(alice, "pause");
  ASSERT_TRUE(offline);
  EXPECT_EQ(offline->status, 409) << offline->body;
  EXPECT_NE(offline->body.find("offline"), std::string::npos) << offline->body;
}

// Every page in a real browser, for a known state: alice and bob, each with a
// device and jobs, one of alice's a sweep with a trial that diverges. The
// script (tests/browser/dashboard.test.mjs) logs in, checks what each page
// shows, that a job submitted meanwhile appears without a reload, that each
// user sees only their own jobs and devices, pauses and resumes alice's
// device from the Me page, checks a ledger entry's inclusion proof in the
// browser, and keeps a screenshot of each page in the build directory.
TEST_F(Dashboard, EveryPageInHeadlessChromium) {
  CLAW_REQUIRE(NeedProgram("/usr/bin/chromium", "chromium"));
  CLAW_REQUIRE(NeedFile(std::string(CLAW_SOURCE_DIR) + "/tests/browser/node_modules/puppeteer-core",
                        "puppeteer-core from npm (scripts/setup.sh runs npm ci in tests/browser)"));
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  StartCoordinator({"--dashboard-interval", "0.25", "--history-every", "2"}, /*secure=*/true);
  const std::string alice = AddUser("alice", "researcher");
  const std::string bob = AddUser("bob", "free");
  std::string out;
  std::map<std::string, std::string> tokens = {{"alice", alice}, {"bob", bob}};
  for (const auto& [name, token] : tokens) {
    ASSERT_EQ(Claw({"--api-token", token, "enroll-token", "--ttl", "600"}, &out), 0) << out;
    StartAgent(name == "alice" ? 2 : 1, {}, true, out.substr(0, out.find('\n')));
  }
  auto submit = [&](const std::string& token, std::vector<std::string> args) {
    args.insert(args.begin(), {"--api-token", token, "submit"});
    args.push_back("--wait");
    EXPECT_EQ(Claw(args, &out), 0) << out;
    const size_t at = out.find("j-");
    return at == std::string::npos ? std::string() : out.substr(at, out.find_first_of(" \n:", at) - at);
  };
  std::ofstream(dir_ / "noop.json") << R"({"app":"noop","tasks":8,"name":"many-noops"})";
  std::ofstream(dir_ / "sweep.json")
      << R"({"app":"sweep","name":"lr-sweep","params":{"base":{"model":"mlp","width":8,)"
         R"("train_limit":300,"test_limit":100,"epochs":2},"space":{"lr":[0.01,0.1,10]}}})";
  const std::string alice_noop = submit(alice, {(dir_ / "noop.json").string()});
  const std::string sweep = submit(alice, {(dir_ / "sweep.json").string(), "--dataset", FashionMnistDir()});
  const std::string bob_noop = submit(bob, {(dir_ / "noop.json").string()});
  ASSERT_FALSE(sweep.empty());
  httplib::SSLClient api("127.0.0.1", http_port_);
  api.set_ca_cert_path(ca_file());
  nlohmann::json users;
  for (const auto& [name, token] : tokens) {
    auto r = api.Get("/api/devices", httplib::Headers{{"Authorization", "Bearer " + token}});
    ASSERT_TRUE(r && r->status == 200);
    nlohmann::json devices = nlohmann::json::array();
    const nlohmann::json body = nlohmann::json::parse(r->body);
    for (const auto& d : body["devices"]) devices.push_back(d["agent_id"]);
    nlohmann::json jobs = nlohmann::json::array();
    for (const std::string& j : name == "alice" ? std::vector<std::string>{alice_noop, sweep}
                                                : std::vector<std::string>{bob_noop}) {
      jobs.push_back(j);
    }
    ASSERT_EQ(devices.size(), 1u) << name << ": " << r->body;
    users[name] = nlohmann::json::object();
    users[name]["token"] = token;
    users[name]["jobs"] = jobs;
    users[name]["devices"] = devices;
  }
  auto ledger = api.Get("/ledger/checkpoint");
  ASSERT_TRUE(ledger && ledger->status == 200);
  const std::string screenshots = std::string(CLAW_BUILD_DIR) + "/dashboard-screenshots";
  std::filesystem::create_directories(screenshots);
  const nlohmann::json fixture = {
      {"url", "https://127.0.0.1:" + std::to_string(http_port_)},
      {"insecure", true},
      {"screenshots", screenshots},
      {"users", users},
      {"sweep_job", sweep},
      {"live_job_spec", {{"app", "noop"}, {"tasks", 3}, {"name", "live-update"}}}};
  std::ofstream(dir_ / "fixture.json") << fixture.dump(2);
  Process browser({"node", std::string(CLAW_SOURCE_DIR) + "/tests/browser/dashboard.test.mjs",
                   (dir_ / "fixture.json").string()},
                  (dir_ / "browser.log").string(), "/usr/bin/env");
  ASSERT_TRUE(browser.Exited(std::chrono::minutes(5))) << browser.Output();
  const std::string log = browser.Output();
  std::printf("%s", log.c_str());
  EXPECT_EQ(browser.exit_code(), 0) << log;
  EXPECT_EQ(log.find("FAIL"), std::string::npos) << log;
  for (const char* page : {"network", "jobs", "job", "devices", "me", "ledger"}) {
    EXPECT_TRUE(std::filesystem::exists(screenshots + "/" + page + ".png")) << page;
  }
}

}  // namespace
}  // namespace claw::testing

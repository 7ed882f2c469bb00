// The command line as a newcomer meets it: exit codes, options after any
// subcommand, tables with headers, the admin's token, enrollment tokens
// that survive a restart and are shared by agents started together, agent
// config files, private files, and errors that say what to do when TLS is
// on one side only.
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "harness.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

class Cli : public Network {
 protected:
  std::string AdminToken() {
    std::string t = ReadFile(data() + "/admin-token");
    return t.substr(0, t.find('\n'));
  }
};

TEST_F(Cli, UsageErrorsExitOneAndHelpZero) {
  std::string out;
  EXPECT_EQ(Claw({"jobs", "--no-such-flag"}, &out), 1) << out;
  EXPECT_NE(out.find("no-such-flag"), std::string::npos) << out;
  EXPECT_EQ(Claw({"no-such-command"}, &out), 1) << out;
  EXPECT_EQ(Claw({"status"}, &out), 1) << "the job id is required\n" << out;
  EXPECT_EQ(Claw({"submit", "--help"}, &out), 0) << out;
  EXPECT_NE(out.find("--wait"), std::string::npos) << out;
}

// The accountant offline (docs/privacy.md): dp_accounting's figure for
// 1,000 rounds at q 0.01 and z 1 (2.10137 at δ 1e-5), and back.
TEST_F(Cli, PrivacyGivesTheAccountantsEpsilonAndTheNoiseABudgetNeeds) {
  std::string out;
  ASSERT_EQ(Claw({"privacy", "epsilon", "--q", "0.01", "--noise", "1", "--rounds", "1000"}, &out), 0)
      << out;
  EXPECT_NE(out.find("ε = 2.10137 at δ = 1e-05"), std::string::npos) << out;
  ASSERT_EQ(Claw({"privacy", "noise", "--q", "0.01", "--rounds", "1000", "--epsilon", "2.10137"}, &out),
            0)
      << out;
  const size_t at = out.find("noise multiplier ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_NEAR(std::stod(out.substr(at + 17)), 1.0, 1e-4) << out;
  EXPECT_EQ(Claw({"privacy", "epsilon", "--q", "2", "--noise", "1"}, &out), 1) << out;
  EXPECT_EQ(Claw({"privacy", "noise", "--rounds", "10"}, &out), 1) << "--epsilon is required\n" << out;
}

// docs/operations.md's own command: global options after `users add`.
TEST_F(Cli, GlobalOptionsWorkAfterAnySubcommand) {
  StartCoordinator({}, /*secure=*/true);
  std::string out;
  Process p({"users", "add", "bob", "--tier", "researcher", "--data", data(), "-c", target(),
             "--ca", ca_file()},
            (dir_ / "users.log").string());
  ASSERT_EQ(p.Wait(), 0) << p.Output();
  EXPECT_EQ(p.Output().rfind("cu-", 0), 0u) << p.Output();
  Process jobs({"jobs", "-c", target(), "--ca", ca_file(), "--api-token", AdminToken()},
               (dir_ / "jobs.log").string());
  EXPECT_EQ(jobs.Wait(), 0) << jobs.Output();
  EXPECT_NE(jobs.Output().find("no jobs yet"), std::string::npos) << jobs.Output();
}

TEST_F(Cli, TablesHaveHeadersAndOneLinePerJob) {
  StartCoordinator();
  StartAgent();
  Client client(target(), seconds(5));
  auto id = client.Submit(R"({"app":"exec","replication":1,"max_attempts":1,)"
                          R"("params":{"command":["sh","-c","echo one >&2; echo two >&2; exit 3"]}})");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  ASSERT_EQ(WaitForJobEnd(client, *id, seconds(60)).state(), "failed");
  std::string out;
  ASSERT_EQ(Claw({"jobs"}, &out), 0) << out;
  std::istringstream lines(out);
  std::string header, row, extra;
  std::getline(lines, header);
  std::getline(lines, row);
  EXPECT_EQ(header.rfind("JOB ", 0), 0u) << out;
  EXPECT_NE(header.find("STATE"), std::string::npos) << out;
  EXPECT_EQ(row.rfind(*id, 0), 0u) << out;
  EXPECT_NE(row.find("exit c..."), std::string::npos) << "the error cut to one line\n" << out;
  EXPECT_FALSE(std::getline(lines, extra)) << "one line for the one job\n" << out;
  // `status` prints the whole error below its row.
  ASSERT_EQ(Claw({"status", *id}, &out), 0) << out;
  EXPECT_NE(out.find("error:\n"), std::string::npos) << out;
  EXPECT_NE(out.find("stderr: one\n  two"), std::string::npos) << out;
  ASSERT_EQ(Claw({"agents"}, &out), 0) << out;
  EXPECT_NE(out.find("OWNER"), std::string::npos) << out;
  // How the agent holds a sandboxed task: a cgroup here (root), or per process.
  EXPECT_TRUE(out.find(" cgroup-v") != std::string::npos || out.find(" per-proc ") != std::string::npos)
      << out;
  ASSERT_EQ(Claw({"agents", "--json"}, &out), 0) << out;
  auto agents = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(agents.is_array() && agents.size() == 1u) << out;
  EXPECT_FALSE(agents[0].value("sandbox", "").empty()) << out;
}

// An admin with a user's token exported still adds users where the
// coordinator's data is; without it, the error says where the token is.
TEST_F(Cli, UsersAddFindsTheAdminTokenAndSaysWhereItIs) {
  StartCoordinator({}, /*secure=*/true);
  std::string out;
  ASSERT_EQ(Claw({"users", "add", "alice", "--data", data()}, &out), 0) << out;
  std::string alice = out.substr(0, out.find('\n'));
  setenv("CLAW_TOKEN", alice.c_str(), 1);
  int with_file = Claw({"users", "add", "bob", "--data", data()}, &out);
  int without = Claw({"users", "add", "carol", "--data", (dir_ / "elsewhere").string()}, &out);
  unsetenv("CLAW_TOKEN");
  EXPECT_EQ(with_file, 0) << "the admin-token file wins over CLAW_TOKEN";
  EXPECT_EQ(without, 2) << out;
  EXPECT_NE(out.find("CLAW_TOKEN"), std::string::npos) << out;
  EXPECT_NE(out.find("admin-token"), std::string::npos) << out;
}

// A daemon keeps nothing the shell that started it held open: `7<secret`
// would otherwise reach its workers and, through them, nothing else.
TEST_F(Cli, DetachedDaemonsKeepNoDescriptorOfTheShellThatStartedThem) {
  std::string secret = (dir_ / "secret.txt").string();
  std::ofstream(secret) << "contributors-secret\n";
  std::string command = "exec 7<" + secret + "; exec " + std::string(CLAW_BINARY) +
                        " coordinator --detach --insecure-local --data " + data() + " --port " +
                        std::to_string(port_) + " --http-port -1";
  Process start({"-c", command}, (dir_ / "detach.log").string(), "/bin/sh");
  ASSERT_TRUE(start.Exited(seconds(60))) << start.Output();
  ASSERT_EQ(start.exit_code(), 0) << start.Output();
  auto info = nlohmann::json::parse(ReadFile(data() + "/coordinator.json"), nullptr, false);
  ASSERT_TRUE(info.is_object() && info.contains("pid")) << ReadFile(data() + "/coordinator.json");
  std::string fds = "/proc/" + std::to_string(info["pid"].get<int>()) + "/fd";
  int open_fds = 0;
  for (const auto& e : std::filesystem::directory_iterator(fds)) {
    std::error_code ec;
    EXPECT_NE(std::filesystem::read_symlink(e.path(), ec).string(), secret) << e.path();
    ++open_fds;
  }
  EXPECT_GT(open_fds, 3) << "its own descriptors (sockets, the database) are there";
  EXPECT_EQ(Claw({"coordinator", "stop", "--data", data()}), 0);
}

TEST_F(Cli, PrivateFilesAreOwnerOnly) {
  StartCoordinator({}, /*secure=*/true);
  for (const char* name : {"claw.db", "admin-token", "enroll-tokens", "coordinator.key"}) {
    struct stat st {};
    ASSERT_EQ(stat((data() + "/" + name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << name;
  }
}

// A restart with --enroll-tokens keeps the unused tokens of the file; agents
// started together on one --token-file each enroll with a token of their own.
TEST_F(Cli, TokenFilesSurviveRestartsAndServeAgentsStartedTogether) {
  StartCoordinator();  // 8 tokens
  StartAgent();        // uses the first line
  ASSERT_TRUE(WaitFor([&] { return Client(target(), seconds(5)).ListAgents()->size() == 1; },
                      seconds(20)));
  coordinator_->Kill(SIGTERM);
  coordinator_ = std::make_unique<Process>(
      std::vector<std::string>{"coordinator", "--data", data(), "--port", std::to_string(port_),
                               "--http-port", "-1", "--enroll-tokens", "2", "--insecure-local"},
      (dir_ / "coordinator2.log").string());
  ASSERT_TRUE(WaitFor([&] {
    std::string text = ReadFile(data() + "/enroll-tokens");
    return std::count(text.begin(), text.end(), '\n') == 9;
  }, seconds(20))) << "7 unused + 2 new:\n" << ReadFile(data() + "/enroll-tokens");
  // Four agents at once, all on the file.
  std::vector<std::unique_ptr<Process>> agents;
  for (int i = 0; i < 4; ++i) {
    agents.push_back(std::make_unique<Process>(
        std::vector<std::string>{"agent", "--coordinator", target(), "--state",
                                 (dir_ / ("together" + std::to_string(i))).string(),
                                 "--token-file", data() + "/enroll-tokens", "--slots", "1",
                                 "--always"},
        (dir_ / ("together" + std::to_string(i) + ".log")).string()));
  }
  Client client(target(), seconds(5));
  ASSERT_TRUE(WaitFor([&] {
    auto list = client.ListAgents();
    return list.ok() && list->size() == 5;
  }, seconds(30))) << agents[0]->Output() << agents[3]->Output();
  // The coordinator lists an agent as soon as it enrolls, a moment before
  // the agent has saved its identity.
  std::set<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    std::string path = (dir_ / ("together" + std::to_string(i)) / "identity.json").string();
    ASSERT_TRUE(WaitFor([&] { return !ReadFile(path).empty(); }, seconds(10))) << path;
    ids.insert(nlohmann::json::parse(ReadFile(path))["agent_id"].get<std::string>());
    EXPECT_FALSE(agents[i]->Exited(std::chrono::milliseconds(0))) << agents[i]->Output();
  }
  EXPECT_EQ(ids.size(), 4u);
}

TEST_F(Cli, AnAgentConfigWithAnUnknownKeyIsRefusedNamingIt) {
  std::ofstream(dir_ / "agent.json") << R"({"slot": 2})";
  Process p({"agent", "--state", (dir_ / "a").string(), "--config", (dir_ / "agent.json").string()},
            (dir_ / "agent.log").string());
  EXPECT_EQ(p.Wait(), 2) << p.Output();
  EXPECT_NE(p.Output().find("unknown key 'slot'"), std::string::npos) << p.Output();
  EXPECT_NE(p.Output().find("slots"), std::string::npos) << "the known keys\n" << p.Output();
}

// TLS on one side only: each side's error says what to pass.
TEST_F(Cli, TlsOnOneSideOnlySaysWhatToPass) {
  StartCoordinator({}, /*secure=*/true);
  std::string token = ReadFile(data() + "/enroll-tokens");
  token = token.substr(0, token.find('\n'));
  // A plaintext agent against a TLS coordinator.
  Process agent({"agent", "--coordinator", target(), "--state", (dir_ / "a").string(), "--token",
                 token, "--always"},
                (dir_ / "plain-agent.log").string());
  EXPECT_TRUE(WaitFor([&] { return agent.Output().find("--ca") != std::string::npos; },
                      seconds(20)))
      << agent.Output();
  agent.Kill(SIGTERM);
  // CLAW_CA reaches agents: the same agent with it exported enrolls.
  setenv("CLAW_CA", ca_file().c_str(), 1);
  Process pinned({"agent", "--coordinator", target(), "--state", (dir_ / "b").string(), "--token",
                  token, "--always"},
                 (dir_ / "pinned-agent.log").string());
  unsetenv("CLAW_CA");
  EXPECT_TRUE(WaitFor([&] { return pinned.Output().find("enrolled") != std::string::npos; },
                      seconds(20)))
      << pinned.Output();
  // A client pinning a CA against a plaintext coordinator.
  coordinator_->Kill(SIGTERM);
  agents_.clear();
  pinned.Kill(SIGTERM);
  StartCoordinator({}, /*secure=*/false);
  std::string out;
  Process client({"jobs", "-c", target(), "--ca", ca_file()}, (dir_ / "tls-client.log").string());
  EXPECT_EQ(client.Wait(), 3) << client.Output();
  EXPECT_NE(client.Output().find("does not speak TLS"), std::string::npos) << client.Output();
}

// Every printing path of `claw results` on a finished job of each app
// that needs no ML library (train_test.cc does train, sweep and infer).
TEST_F(Cli, FinishedJobsOfEveryAppPrint) {
  StartCoordinator();
  StartAgent();
  StartAgent();
  std::string out;
  std::vector<std::string> jobs;
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--app", "montecarlo", "-p", "model=pi", "-p", "paths=1e5"},
        {"--app", "noop", "--tasks", "3"},
        {"--app", "exec", "--range", "n=1..3", "--", "sh", "-c", "echo {n}"}}) {
    args.insert(args.begin(), {"submit", "--wait"});
    ASSERT_EQ(Claw(args, &out), 0) << out;
    jobs.push_back(out.substr(out.find("j-"), 12));
  }
  for (const std::string& job : jobs) {
    for (std::vector<std::string> how :
         {std::vector<std::string>{}, {"--format", "csv"}, {"--format", "json"}, {"--json"}}) {
      how.insert(how.begin(), {"results", job});
      EXPECT_EQ(Claw(how, &out), 0) << job << "\n" << out;
      EXPECT_EQ(out.find("terminate called"), std::string::npos) << out;
    }
    EXPECT_EQ(Claw({"status", job}, &out), 0) << out;
  }
  ASSERT_EQ(Claw({"results", jobs[0]}, &out), 0);
  EXPECT_NE(out.find("estimate"), std::string::npos) << out;
  // A result with no files to download says so (exit 2), never aborts.
  EXPECT_EQ(Claw({"results", jobs[0], "--best", "--out", (dir_ / "x").string()}, &out), 2) << out;
}

}  // namespace
}  // namespace claw::testing

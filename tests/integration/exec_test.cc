// The exec app through the whole network: a sweep of shell commands run in
// the sandbox on two agents, each task run on both (2/2) and compared.
#include <fstream>

#include "sandbox/sandbox.h"
#include "harness.h"
#include "tests/requirements.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

class Exec : public Network {};

TEST_F(Exec, ASweepOfCommandsRunsSandboxedAndReplicated) {
  CLAW_REQUIRE(NeedSandbox());
  StartCoordinator();
  StartAgent();
  StartAgent();
  Client client(target(), seconds(5));
  auto id = client.Submit(
      R"({"app":"exec","params":{"command":["sh","-c","echo frame {frame}; echo {frame} | sha256sum"],)"
      R"("sweep":{"frame":"1..12"},"timeout_s":30}})");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  v1::JobInfo end = WaitForJobEnd(client, *id, seconds(120));
  ASSERT_EQ(end.state(), "done") << end.error();
  auto results = client.Results(*id);
  ASSERT_TRUE(results.ok());
  auto r = nlohmann::json::parse(results->result_json());
  ASSERT_EQ(r["tasks"].size(), 12u);
  for (int i = 0; i < 12; ++i) {
    const auto& t = r["tasks"][i];
    EXPECT_EQ(t["vars"]["frame"], i + 1);
    std::string out = t["stdout"];
    EXPECT_EQ(out.rfind("frame " + std::to_string(i + 1) + "\n", 0), 0u) << out;
    EXPECT_EQ(out.size(), std::string("frame " + std::to_string(i + 1) + "\n").size() + 64 + 4);
  }
  // Both agents agreed on every task.
  auto agents = client.ListAgents();
  ASSERT_TRUE(agents.ok());
  for (const auto& a : *agents) EXPECT_EQ(a.invalid_results(), 0u);
}

// The CLI's whole path for files: upload inputs, run a sweep that reads
// them and writes files, then download the outputs, each checked by hash.
TEST_F(Exec, InputFilesGoOutAndOutputFilesComeBackAsCheckedBlobs) {
  CLAW_REQUIRE(NeedSandbox());
  StartCoordinator();
  StartAgent();
  StartAgent();
  std::ofstream(dir_ / "words.txt") << "alpha\nbeta\n";
  std::string out;
  ASSERT_EQ(Claw({"submit", "--app", "exec", "--wait", "-i", (dir_ / "words.txt").string(),
                  "-i", "cfg/n.txt=" + (dir_ / "words.txt").string(), "-o", "out/*.txt",
                  "--range", "f=1..4", "--", "sh", "-c",
                  "mkdir out && tr a-z A-Z < words.txt > out/f{f}.txt && "
                  "wc -l < cfg/n.txt >> out/f{f}.txt && echo {f} >> out/f{f}.txt"},
                 &out),
            0)
      << out;
  std::string job = out.substr(out.find("j-"), 12);
  ASSERT_EQ(Claw({"results", job, "--out", (dir_ / "got").string()}, &out), 0) << out;
  for (int f = 1; f <= 4; ++f) {
    std::string path = (dir_ / "got" / "out" / ("f" + std::to_string(f) + ".txt")).string();
    EXPECT_EQ(ReadFile(path), "ALPHA\nBETA\n2\n" + std::to_string(f) + "\n") << path;
  }
  EXPECT_NE(out.find("4 files"), std::string::npos) << out;
  // Both agents made the same files for every task (2/2 by default).
  auto agents = Client(target(), seconds(5)).ListAgents();
  ASSERT_TRUE(agents.ok());
  for (const auto& a : *agents) {
    EXPECT_EQ(a.valid_results(), 4u);
    EXPECT_EQ(a.invalid_results(), 0u);
  }
  // A job that names a blob nobody uploaded is refused at submission.
  ASSERT_NE(Claw({"submit", R"(-)"}, &out), 0);  // no spec on stdin
  Client client(target(), seconds(5));
  auto bad = client.Submit(R"({"app":"exec","params":{"command":["cat","x"],"inputs":{"x":")" +
                           std::string(64, 'e') + R"("}}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("upload it first"), std::string::npos)
      << bad.status().message();
}

// Hostile commands fail their own tasks, and the agent goes on with the rest.
TEST_F(Exec, HostileCommandsAreContainedAndTheAgentKeepsWorking) {
  CLAW_REQUIRE(NeedSandbox());
  StartCoordinator();
  StartAgent(2);
  Client client(target(), seconds(5));
  auto hostile = [&](const std::string& script, nlohmann::json params = nlohmann::json::object()) {
    params["command"] = {"sh", "-c", script};
    params["timeout_s"] = 4;
    nlohmann::json spec = {{"app", "exec"}, {"replication", 1}, {"max_attempts", 1},
                           {"params", params}};
    auto id = client.Submit(spec.dump());
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : "";
  };
  std::string bomb = hostile("bomb() { bomb | bomb & }; bomb; sleep 60", {{"processes", 64}});
  std::string hog = hostile("python3 -c 'x = bytearray(1 << 33)'", {{"memory_mb", 256}});
  std::string net = hostile("python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", " +
                            std::to_string(port_) + "), 2)'");
  std::string peek = hostile("cat " + data() + "/coordinator.key");
  auto fine = client.Submit(R"({"app":"exec","replication":1,)"
                            R"("params":{"command":["sh","-c","echo {n}"],"sweep":{"n":"1..20"}}})");
  ASSERT_TRUE(fine.ok());
  for (const std::string& id : {bomb, hog, net, peek}) {
    v1::JobInfo end = WaitForJobEnd(client, id, seconds(60));
    EXPECT_EQ(end.state(), "failed") << id << ": " << end.error();
  }
  auto error_of = [&](const std::string& id) { return WaitForJobEnd(client, id).error(); };
  // Contained either way: its processes fill the task's allowance (the
  // shell then cannot start `sleep` and exits) or the timeout ends them all.
  std::string bombed = error_of(bomb);
  EXPECT_TRUE(bombed.find("timed out") != std::string::npos ||
              bombed.find("Cannot fork") != std::string::npos)
      << bombed;
  EXPECT_NE(error_of(hog).find("MemoryError"), std::string::npos) << error_of(hog);
  // The coordinator listens on this port on the host; the sandbox has a
  // loopback of its own, where nothing does.
  EXPECT_NE(error_of(net).find("Connection refused"), std::string::npos) << error_of(net);
  EXPECT_NE(error_of(peek).find("No such file"), std::string::npos) << error_of(peek);
  EXPECT_EQ(WaitForJobEnd(client, *fine, seconds(60)).state(), "done");
  EXPECT_FALSE(agents_[0]->Exited(std::chrono::milliseconds(0))) << "the agent survived it all";
}

// The example in examples/render, small: POV-Ray renders frames on two
// agents, each frame twice, and the PNGs come back identical and checked.
TEST_F(Exec, TheRenderExampleRendersFramesWithPovray) {
  CLAW_REQUIRE(NeedSandbox());
  CLAW_REQUIRE(NeedProgram("/usr/bin/povray", "povray"));
  CLAW_REQUIRE(NeedFile("/usr/share/povray-3.7/include/colors.inc", "povray-includes"));
  CLAW_REQUIRE(NeedProgram("/usr/bin/python3", "python3"));
  std::string script = std::string(CLAW_SOURCE_DIR) + "/examples/render/render.sh";
  std::string cmd = "CLAW=" CLAW_BINARY " FRAMES=4 SIZE=96x72 OUT=" + (dir_ / "frames").string() +
                    " " + script + " >" + (dir_ / "render.log").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << ReadFile((dir_ / "render.log").string());
  std::string log = ReadFile((dir_ / "render.log").string());
  EXPECT_NE(log.find("4 files"), std::string::npos) << log;
  for (int f = 1; f <= 4; ++f) {
    std::string png = ReadFile((dir_ / "frames" / ("frame" + std::to_string(f) + ".png")).string());
    ASSERT_GT(png.size(), 1000u) << "frame " << f << "\n" << log;
    EXPECT_EQ(png.substr(1, 3), "PNG");
  }
}

TEST_F(Exec, ACommandThatKeepsFailingFailsTheJobWithItsError) {
  CLAW_REQUIRE(NeedSandbox());
  StartCoordinator();
  StartAgent();
  Client client(target(), seconds(5));
  auto id = client.Submit(
      R"({"app":"exec","replication":1,"max_attempts":2,)"
      R"("params":{"command":["sh","-c","echo no such input >&2; exit 2"]}})");
  ASSERT_TRUE(id.ok());
  v1::JobInfo end = WaitForJobEnd(client, *id, seconds(60));
  EXPECT_EQ(end.state(), "failed");
  EXPECT_NE(end.error().find("exit code 2"), std::string::npos) << end.error();
  EXPECT_NE(end.error().find("no such input"), std::string::npos) << end.error();
}

// Replicas agree on the sandbox's uid, whichever agent and slot ran them.
TEST_F(Exec, ReplicasAgreeOnTheUidTheySee) {
  CLAW_REQUIRE(NeedSandbox());
  StartCoordinator();
  StartAgent(2);
  StartAgent(2);
  Client client(target(), seconds(5));
  auto id = client.Submit(R"({"app":"exec","replication":2,"adaptive":false,)"
                          R"("params":{"command":["sh","-c","id -u; id -g"],"sweep":{"n":"1..6"}}})");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  v1::JobInfo end = WaitForJobEnd(client, *id, seconds(60));
  ASSERT_EQ(end.state(), "done") << end.error();
  auto r = nlohmann::json::parse(client.Results(*id)->result_json());
  for (const auto& t : r["tasks"]) EXPECT_EQ(t["stdout"], "1000\n1000\n");
}

// Replicas that disagree with no third agent to break the tie: the job says
// why it waits, then fails after its quorum_wait naming what differed.
TEST_F(Exec, DisagreeingReplicasWithoutATieBreakerFailNamingThePart) {
  CLAW_REQUIRE(NeedSandbox());
  StartCoordinator();
  StartAgent();
  StartAgent();
  Client client(target(), seconds(5));
  auto id = client.Submit(
      R"({"app":"exec","replication":2,"quorum_wait_s":3,)"
      R"("params":{"command":["sh","-c","head -c8 /dev/urandom | od -An -tx1"]}})");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  std::string waiting;
  v1::JobInfo end;
  ASSERT_TRUE(WaitFor([&] {
    auto j = client.GetJob(*id);
    if (!j.ok()) return false;
    if (!j->waiting().empty()) waiting = j->waiting();
    end = *j;
    return j->state() != "running";
  }, seconds(60)));
  EXPECT_NE(waiting.find("needs another agent"), std::string::npos) << waiting;
  EXPECT_NE(waiting.find("differ in stdout"), std::string::npos) << waiting;
  EXPECT_EQ(end.state(), "failed");
  EXPECT_NE(end.error().find("no quorum"), std::string::npos) << end.error();
  EXPECT_NE(end.error().find("they differ in stdout"), std::string::npos) << end.error();
  EXPECT_NE(end.error().find("could break the tie"), std::string::npos) << end.error();
  // The same job comparing only its files, which are reproducible, is done.
  auto files = client.Submit(
      R"({"app":"exec","replication":2,"params":{"compare":["files"],"outputs":["out.txt"],)"
      R"("command":["sh","-c","head -c8 /dev/urandom | od -An -tx1; echo same > out.txt"]}})");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ(WaitForJobEnd(client, *files, seconds(60)).state(), "done");
}

}  // namespace
}  // namespace claw::testing

// The exec app: planning a sweep, and commands run in the sandbox (real
// bubblewrap: these tests check what a hostile command can and cannot do).
#include "apps/exec.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "apps/registry.h"
#include "sandbox/sandbox.h"
#include "common/blobs.h"
#include "core/job_spec.h"
#include "tests/requirements.h"

namespace claw {
namespace {

using nlohmann::json;

Result<PlannedJob> PlanExec(const std::string& params) {
  static const AppRegistry apps = BuiltinApps();
  return ParseAndPlanJob(R"({"app":"exec","params":)" + params + "}", apps);
}

TEST(ExecPlan, ASweepIsTheGridOfItsValuesWithArgumentsFilledIn) {
  auto p = PlanExec(R"({"command":["render","--frame={frame}","{q}"],
                        "sweep":{"frame":"1..3","q":["low","high"]}})");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->tasks.size(), 6u);
  json first = json::parse(p->tasks[0].params);
  EXPECT_EQ(first["argv"], json({"render", "--frame=1", "low"}));
  json last = json::parse(p->tasks[5].params);
  EXPECT_EQ(last["argv"], json({"render", "--frame=3", "high"}));
  EXPECT_EQ(last["vars"]["frame"], 3);
  EXPECT_EQ(p->spec.replication, 2u) << "untrusted output: checked by default";
}

TEST(ExecPlan, BadSpecsNameTheField) {
  auto expect = [](const std::string& params, const std::string& needle) {
    auto p = PlanExec(params);
    ASSERT_FALSE(p.ok()) << params;
    EXPECT_NE(p.status().message().find(needle), std::string::npos) << p.status().message();
  };
  expect(R"({})", "params.command");
  expect(R"({"command":"ls"})", "params.command");
  expect(R"({"command":["ls",3]})", "params.command");
  expect(R"({"command":["ls"],"sweep":{"f":"9..1"}})", "params.sweep.f");
  expect(R"({"command":["ls"],"sweep":{"f":"1..x"}})", "params.sweep.f");
  expect(R"({"command":["ls"],"sweep":{"f":[]}})", "params.sweep.f");
  expect(R"({"command":["ls"],"sweep":{"a":"1..1000","b":"1..1001"}})", "more than");
  expect(R"({"command":["ls"],"timeout_s":0})", "params.timeout_s");
  expect(R"({"command":["ls"],"shell":true})", "shell");
  const std::string h(64, 'a');
  expect(R"({"command":["ls"],"inputs":{"../etc/passwd":")" + h + R"("}})", "escapes the scratch");
  expect(R"({"command":["ls"],"inputs":{"/etc/passwd":")" + h + R"("}})", "absolute");
  expect(R"({"command":["ls"],"inputs":{"a//b":")" + h + R"("}})", "empty");
  expect(R"({"command":["ls"],"inputs":{"a":"not-a-hash"}})", "params.inputs.a");
  expect(R"({"command":["ls"],"outputs":["../*.png"]})", "escapes the scratch");
  expect(R"({"command":["ls"],"outputs":["/tmp/*"]})", "absolute");
  expect(R"({"command":["ls"],"outputs":"*.png"})", "params.outputs");
}

// Replicas are compared on what the job names, and a disagreement says
// which part differed.
TEST(ExecPlan, ReplicasAreComparedOnWhatTheJobNames) {
  auto bad = PlanExec(R"({"command":["ls"],"compare":["stdout","colour"]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("params.compare: \"colour\""), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(PlanExec(R"({"command":["ls"],"compare":[]})").ok());
  EXPECT_FALSE(PlanExec(R"({"command":["ls"],"compare":["files","files"]})").ok());

  auto all = PlanExec(R"({"command":["ls"]})");
  auto files = PlanExec(R"({"command":["ls"],"compare":["files"]})");
  ASSERT_TRUE(all.ok() && files.ok());
  ExecApp app;
  auto out = [](std::string out, std::string hash) {
    return json{{"vars", json::object()}, {"exit", 0},        {"stdout", out}, {"stderr", ""},
                {"truncated", false},     {"files", {{{"path", "a.png"}, {"sha256", hash}, {"size", 1}}}}}
        .dump();
  };
  const std::string& p_all = all->tasks[0].params;
  const std::string& p_files = files->tasks[0].params;
  EXPECT_TRUE(app.Equivalent(p_all, out("x", "h1"), out("x", "h1")));
  EXPECT_FALSE(app.Equivalent(p_all, out("x", "h1"), out("y", "h1")));
  EXPECT_EQ(app.Difference(p_all, out("x", "h1"), out("y", "h1")), "stdout");
  EXPECT_TRUE(app.Equivalent(p_files, out("x", "h1"), out("y", "h1"))) << "stdout not compared";
  EXPECT_FALSE(app.Equivalent(p_files, out("x", "h1"), out("x", "h2")));
  EXPECT_EQ(app.Difference(p_files, out("x", "h1"), out("x", "h2")), "the file a.png");
}

TEST(ExecPlan, InputsAndOutputsTravelWithEveryTaskAndNameTheirBlobs) {
  const std::string h(64, 'b');
  auto p = PlanExec(R"({"command":["cat","scene.pov"],"sweep":{"f":"1..2"},
                        "inputs":{"scene.pov":")" + h + R"("},"outputs":["*.png"]})");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ExecApp app;
  EXPECT_EQ(app.SpecInputBlobs(p->spec), std::vector<std::string>{h});
  for (const auto& t : p->tasks) {
    EXPECT_EQ(app.TaskInputBlobs(t.params), std::vector<std::string>{h});
  }
  EXPECT_EQ(app.OutputBlobs(R"({"files":[{"path":"a","sha256":")" + h + R"(","size":1}]})"),
            std::vector<std::string>{h});
  EXPECT_TRUE(app.OutputBlobs("not json").empty());
}

// The macOS profile is only run on macOS, but what it allows is checked
// everywhere: nothing by default, no network, writes only in the scratch
// directory, whose name cannot break out of its string.
TEST(SandboxExecProfile, DeniesByDefaultAndAllowsWritesOnlyInTheScratchDirectory) {
  std::string p = SandboxExecProfile("/private/tmp/claw-task-1");
  EXPECT_NE(p.find("(deny default)"), std::string::npos);
  EXPECT_NE(p.find("(deny network*)"), std::string::npos);
  EXPECT_NE(p.find(R"((allow file-read* file-write* (subpath "/private/tmp/claw-task-1")))"),
            std::string::npos);
  size_t writes = 0;
  for (size_t at = p.find("file-write"); at != std::string::npos; at = p.find("file-write", at + 1)) {
    ++writes;
  }
  EXPECT_EQ(writes, 2u) << "/dev/null and the scratch directory, nothing else\n" << p;
  std::string evil = SandboxExecProfile(R"(/tmp/x") (subpath "/)");
  EXPECT_NE(evil.find(R"((subpath "/tmp/x\") (subpath \"/"))"), std::string::npos) << evil;
}

class Sandboxed : public ::testing::Test {
 protected:
  void SetUp() override {
    CLAW_REQUIRE(claw::testing::NeedSandbox());
    dir_ = std::filesystem::temp_directory_path() / ("claw-sbx-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  SandboxResult Run(const std::string& script, SandboxLimits limits = {}) {
    auto r = RunSandboxed({"sh", "-c", script}, dir_.string(), limits);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : SandboxResult{};
  }
  std::filesystem::path dir_;
};

TEST_F(Sandboxed, OnlyTheScratchDirectoryIsWritable) {
  auto r = Run("echo hi > /work/out.txt && cat out.txt && touch /usr/evil");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.stdout_text, "hi\n");
  EXPECT_NE(r.stderr_text.find("Read-only"), std::string::npos) << r.stderr_text;
  EXPECT_TRUE(std::filesystem::exists(dir_ / "out.txt"));
  EXPECT_FALSE(std::filesystem::exists("/usr/evil"));
}

TEST_F(Sandboxed, TheHostsFilesAndNetworkAreOutOfSight) {
  std::string secret = (std::filesystem::temp_directory_path() / "claw-secret-key").string();
  std::ofstream(secret) << "agent secret";
  auto r = Run("cat " + secret + "; cat /etc/hostname; ls /root; ls /sys/class/net");
  EXPECT_EQ(r.stdout_text.find("agent secret"), std::string::npos);
  EXPECT_NE(r.stderr_text.find("No such file"), std::string::npos) << r.stderr_text;
  std::filesystem::remove(secret);
  // No network device but loopback: a connection anywhere fails.
  auto net = Run("cat /proc/net/dev");
  EXPECT_EQ(net.stdout_text.find("eth"), std::string::npos) << net.stdout_text;
  EXPECT_EQ(net.stdout_text.find("ens"), std::string::npos) << net.stdout_text;
}

TEST_F(Sandboxed, RunawaysAreStopped) {
  SandboxLimits limits;
  limits.wall_time = std::chrono::seconds(1);
  auto slow = Run("sleep 30", limits);
  EXPECT_TRUE(slow.timed_out);

  SandboxLimits small;
  small.memory_bytes = 64 << 20;
  auto hungry = Run("python3 -c 'x = bytearray(512 << 20)' || exit 3", small);
  EXPECT_NE(hungry.exit_code, 0);

  SandboxLimits files;
  files.file_bytes = 1 << 20;
  auto big = Run("head -c 5000000 /dev/zero > /work/big", files);
  EXPECT_NE(big.exit_code, 0);
  EXPECT_LE(std::filesystem::file_size(dir_ / "big"), 1u << 20);

  SandboxLimits chatty;
  chatty.output_bytes = 1000;
  auto loud = Run("head -c 100000 /dev/zero | tr '\\0' x", chatty);
  EXPECT_EQ(loud.stdout_text.size(), 1000u);
  EXPECT_TRUE(loud.truncated);
}

// Bounded first (at most 3000 processes even if nothing held), then a real
// fork bomb only once the bound is shown to hold.
TEST_F(Sandboxed, AForkBombStopsAtTheProcessLimitAndTheTimeoutEndsIt) {
  SandboxLimits limits;
  limits.processes = 32;
  limits.wall_time = std::chrono::seconds(20);
  // The shell records each process it starts (echo is a builtin) and dies
  // at the first fork that fails.
  auto counted = Run("for i in $(seq 3000); do sleep 30 & echo $! >> /work/pids; done", limits);
  EXPECT_NE(counted.exit_code, 0);
  std::ifstream pids(dir_ / "pids");
  int started = 0;
  for (std::string line; std::getline(pids, line);) ++started;
  ASSERT_GT(started, 0) << counted.stderr_text;
  ASSERT_LE(started, 32) << "the process limit did not hold";

  limits.wall_time = std::chrono::seconds(3);
  Stopwatch watch;
  // `exec`: the shell waits without forking (a `sleep` it had to fork could
  // find the process limit already taken by the bomb, and end at once).
  auto bomb = Run("bomb() { bomb | bomb & }; bomb; exec sleep 60", limits);
  EXPECT_TRUE(bomb.timed_out);
  EXPECT_LT(watch.Seconds(), 10.0);
  // The host still forks, and the sandbox still works.
  EXPECT_EQ(Run("echo alive", SandboxLimits{}).stdout_text, "alive\n");
}

// Inside, every command sees the same uid, whoever runs it: replicas on
// different agents and slots agree on `id -u`. Outside, an agent running as
// root runs it as its slot's unprivileged uid.
TEST_F(Sandboxed, CommandsSeeOneUidAndRootAgentsRunThemAsTheSlotsUid) {
  SandboxLimits limits;
  limits.uid = SandboxUidBlock("/some/agent/state") + 3;
  auto r = Run("id -u; id -g; touch mine", limits);
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(r.stdout_text, std::to_string(kSandboxVisibleUid) + "\n" +
                               std::to_string(kSandboxVisibleUid) + "\n");
  struct stat st;
  ASSERT_EQ(stat((dir_ / "mine").c_str(), &st), 0);
  if (geteuid() == 0) {
    EXPECT_EQ(st.st_uid, limits.uid) << "the slot's uid, the same on every run";
  } else {
    EXPECT_EQ(st.st_uid, geteuid());
  }
  // Blocks are per agent state directory, inside the range, a slot's worth apart.
  uid_t a = SandboxUidBlock("/var/lib/agent-a"), b = SandboxUidBlock("/var/lib/agent-b");
  EXPECT_EQ(a, SandboxUidBlock("/var/lib/agent-a"));
  EXPECT_NE(a, b);
  for (uid_t block : {a, b}) {
    EXPECT_GE(block, kSandboxUidBase);
    EXPECT_LE(block + kSandboxSlotsPerAgent, kSandboxUidBase + kSandboxUids);
    EXPECT_EQ((block - kSandboxUidBase) % kSandboxSlotsPerAgent, 0u);
  }
}

TEST_F(Sandboxed, ACommandThatFailsFailsItsTaskWithStderr) {
  ExecApp app;
  auto ok = app.Run(R"({"argv":["sh","-c","echo frame {x}"],"vars":{"x":1},"timeout_s":10})", {});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(json::parse(*ok)["stdout"], "frame {x}\n");
  auto bad = app.Run(R"({"argv":["sh","-c","echo broken >&2; exit 4"],"vars":{},"timeout_s":10})", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("exit code 4"), std::string::npos);
  EXPECT_NE(bad.status().message().find("broken"), std::string::npos);
}

// Files in and out through the blob cache, as an agent runs them.
TEST_F(Sandboxed, InputFilesComeInAndOutputFilesLeaveAsBlobs) {
  BlobDir blobs((dir_ / "blobs").string());
  ASSERT_TRUE(blobs.Init().ok());
  std::ofstream(dir_ / "in.txt") << "hello blobs\n";
  auto in = blobs.Import((dir_ / "in.txt").string(), 1 << 20);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ExecApp app;
  json params = {{"argv", {"sh", "-c", "mkdir out && tr a-z A-Z < data/in.txt > out/up.txt && "
                                       "echo side > other.log"}},
                 {"vars", json::object()},
                 {"timeout_s", 10},
                 {"inputs", {{"data/in.txt", *in}}},
                 {"outputs", {"out/*.txt"}}};
  auto out = app.Run(params.dump(), RunContext{&blobs});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  json o = json::parse(*out);
  ASSERT_EQ(o["files"].size(), 1u) << o.dump();
  EXPECT_EQ(o["files"][0]["path"], "out/up.txt");
  std::string hash = o["files"][0]["sha256"];
  EXPECT_EQ(hash, Sha256Hex("HELLO BLOBS\n"));
  EXPECT_TRUE(blobs.Has(hash));
  EXPECT_EQ(app.OutputBlobs(*out), std::vector<std::string>{hash});

  // A pattern that matches nothing fails the task, naming the pattern.
  params["outputs"] = {"*.png"};
  auto none = app.Run(params.dump(), RunContext{&blobs});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("*.png"), std::string::npos);

  // An input the cache does not hold fails the task before the command runs.
  params["inputs"] = {{"x", std::string(64, 'c')}};
  params["outputs"] = json::array();
  EXPECT_FALSE(app.Run(params.dump(), RunContext{&blobs}).ok());
}

// A command cannot smuggle a host file out by leaving a symbolic link where
// an output is expected: links are refused, never followed.
TEST_F(Sandboxed, OutputLinksAreRefusedNotFollowed) {
  BlobDir blobs((dir_ / "blobs").string());
  ASSERT_TRUE(blobs.Init().ok());
  ExecApp app;
  json params = {{"argv", {"sh", "-c", "ln -s /etc/passwd leak.txt; mkdir d; ln -s /etc d/etc"}},
                 {"vars", json::object()},
                 {"timeout_s", 10},
                 {"outputs", {"*.txt"}}};
  auto out = app.Run(params.dump(), RunContext{&blobs});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("not a regular file"), std::string::npos)
      << out.status().message();
  params["outputs"] = {"d/etc/*"};  // through a linked directory: not descended into
  auto through = app.Run(params.dump(), RunContext{&blobs});
  ASSERT_FALSE(through.ok());
  EXPECT_NE(through.status().message().find("matched no file"), std::string::npos);
}

}  // namespace
}  // namespace claw

// The exec app: planning a sweep, and commands run in the sandbox (real
// bubblewrap: these tests check what a hostile command can and cannot do).
#include "apps/exec.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "apps/registry.h"
#include "apps/sandbox.h"
#include "core/job_spec.h"

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
}

class Sandboxed : public ::testing::Test {
 protected:
  void SetUp() override {
    Status st = SandboxAvailable();
    if (!st.ok()) GTEST_SKIP() << "no sandbox on this machine: " << st.message();
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

TEST_F(Sandboxed, ACommandThatFailsFailsItsTaskWithStderr) {
  ExecApp app;
  auto ok = app.Run(R"({"argv":["sh","-c","echo frame {x}"],"vars":{"x":1},"timeout_s":10})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(json::parse(*ok)["stdout"], "frame {x}\n");
  auto bad = app.Run(R"({"argv":["sh","-c","echo broken >&2; exit 4"],"vars":{},"timeout_s":10})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("exit code 4"), std::string::npos);
  EXPECT_NE(bad.status().message().find("broken"), std::string::npos);
}

}  // namespace
}  // namespace claw

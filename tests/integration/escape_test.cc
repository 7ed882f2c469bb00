// Text a task controls (its stderr, hence its failure reason and its job's
// error) and text a submitter controls (a job's name) reach the
// coordinator's log and users' terminals escaped: no terminal escape
// sequence gets through, and no newline starts a line that looks like one
// the coordinator wrote.
#include <sstream>

#include "harness.h"
#include "tests/requirements.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

class Escape : public Network {};

constexpr char kForged[] = "13:00:00.000 info [coordinator] job done";

// Lines of `text` that begin with `prefix`.
std::vector<std::string> LinesStartingWith(const std::string& text, const std::string& prefix) {
  std::vector<std::string> found;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0) found.push_back(line);
  }
  return found;
}

TEST_F(Escape, ATasksStderrCannotDrawOnTerminalsOrForgeLogLines) {
  CLAW_REQUIRE(NeedSandbox());
  StartCoordinator();
  StartAgent();
  Client client(target(), seconds(5));
  nlohmann::json spec = {
      {"app", "exec"},
      {"name", "n\x1b[31mred"},
      {"replication", 1},
      {"max_attempts", 1},
      {"params",
       {{"command",
         {"sh", "-c", std::string("printf '\\033[2J\\n") + kForged + "\\n' >&2; exit 3"}}}}};
  auto id = client.Submit(spec.dump());
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  v1::JobInfo end = WaitForJobEnd(client, *id, seconds(60));
  ASSERT_EQ(end.state(), "failed");
  // The agent sends a command's stderr as valid UTF-8 with controls but
  // newlines escaped (a protobuf string); the forged line's newline stays,
  // for the coordinator and the CLI to escape where they print it.
  ASSERT_NE(end.error().find("\\x1b[2J"), std::string::npos) << end.error();
  ASSERT_NE(end.error().find(std::string("\n") + kForged), std::string::npos) << end.error();

  std::string log = coordinator_->Output();
  EXPECT_NE(log.find("task failed"), std::string::npos) << "the failure is logged\n" << log;
  EXPECT_NE(log.find("\\x1b[2J\\n" + std::string(kForged)), std::string::npos) << log;
  EXPECT_EQ(log.find('\x1b'), std::string::npos) << log;
  EXPECT_TRUE(LinesStartingWith(log, kForged).empty()) << log;
  std::string agent_log = agents_[0]->Output();
  EXPECT_EQ(agent_log.find('\x1b'), std::string::npos) << agent_log;
  EXPECT_TRUE(LinesStartingWith(agent_log, kForged).empty()) << agent_log;

  // Every human view of the job: its row and its whole error, the table,
  // and the refusal of `results`.
  std::string out;
  ASSERT_EQ(Claw({"status", *id}, &out), 0) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_NE(out.find("\\x1b[2J"), std::string::npos) << out;
  EXPECT_NE(out.find(" n\\x1b[3... "), std::string::npos) << "the name, cut to 10\n" << out;
  ASSERT_EQ(Claw({"jobs"}, &out), 0) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_NE(Claw({"results", *id}, &out), 0) << out;
  EXPECT_NE(out.find("\\x1b[2J"), std::string::npos) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_TRUE(LinesStartingWith(out, kForged).empty()) << out;
  // Machine-readable output is left as the API holds it (JSON escapes it);
  // the name, which no agent touched, has its raw ESC.
  ASSERT_EQ(Claw({"status", *id, "--json"}, &out), 0) << out;
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_NE(j.value("error", "").find("\\x1b[2J\n" + std::string(kForged)), std::string::npos)
      << out;
  EXPECT_NE(j.value("name", "").find("\x1b[31m"), std::string::npos) << out;
}

}  // namespace
}  // namespace claw::testing

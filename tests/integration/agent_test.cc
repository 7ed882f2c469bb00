// The agent as its owner sees it: restarts, and the owner coming back.
#include "harness.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

// The one-letter state of a process in /proc ('T' when stopped).
char ProcessState(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

class AgentLife : public Network {};

TEST_F(AgentLife, RestartsFromItsSavedIdentityWithoutAToken) {
  StartCoordinator();
  Process& first = StartAgent();
  Client client(target(), seconds(5));
  auto job = client.Submit(R"({"app":"noop","tasks":50})");
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(WaitForJobEnd(client, *job).state(), "done");
  first.Kill(SIGTERM);
  std::string identity = ReadFile((dir_ / "agent0" / "identity.json").string());
  ASSERT_NE(identity.find("agent_id"), std::string::npos);

  // Same state directory, no token: it must come back as the same agent.
  Process again({"agent", "--coordinator", target(), "--state", (dir_ / "agent0").string(),
                 "--always", "--slots", "1"},
                (dir_ / "again.log").string());
  auto second = client.Submit(R"({"app":"noop","tasks":50})");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(WaitForJobEnd(client, *second, seconds(60)).state(), "done") << again.Output();
  std::string agent_id = nlohmann::json::parse(identity)["agent_id"];
  EXPECT_NE(ReadFile((dir_ / "coordinator.log").string())
                .find("session opened agent=" + agent_id),
            std::string::npos);
  EXPECT_EQ(ReadFile((dir_ / "again.log").string()).find("enrolled"), std::string::npos)
      << "a restart must not enroll again";
}

// The owner comes back: the agent freezes its workers at once, hands its
// tasks back after the grace period, and takes work again once the owner
// leaves. No task is lost or counted as failed.
TEST_F(AgentLife, OwnerReturnPausesWorkersThenHandsTasksBack) {
  StartCoordinator({"--session-grace", "1"});
  auto sensors = dir_ / "sensors.json";
  WriteSensors(sensors, 3600);  // idle for an hour
  Process& shared = StartAgent(
      1, {"--sensors-file", sensors.string(), "--grace", "1", "--idle-minutes", "1"}, false);
  Process& dedicated = StartAgent(1);
  Client client(target(), seconds(5));
  // ~35 ms tasks, about 4 s of work on one core.
  const char* spec =
      R"({"app":"montecarlo","tasks":120,"seed":5,"replication":1,"params":{"model":"european_call","paths":150000000}})";
  auto id = client.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  ASSERT_TRUE(WaitFor([&] { return WorkersOf(shared.pid()).size() == 1; }, seconds(20)));
  pid_t worker = WorkersOf(shared.pid())[0];
  ASSERT_TRUE(WaitFor([&] {
    auto j = client.GetJob(*id);
    return j.ok() && j->tasks_done() >= 4;
  }, seconds(60)));
  ASSERT_EQ(client.GetJob(*id)->state(), "running");

  WriteSensors(sensors, 0);  // the owner is back
  EXPECT_TRUE(WaitFor([&] { return ProcessState(worker) == 'T'; }, seconds(10)))
      << "the worker should be stopped; state " << ProcessState(worker);
  EXPECT_TRUE(WaitFor([&] { return shared.Output().find("paused -> away") != std::string::npos; },
                      seconds(10)))
      << shared.Output();
  v1::JobInfo end = WaitForJobEnd(client, *id);
  EXPECT_EQ(end.state(), "done") << end.error();
  EXPECT_EQ(end.tasks_done(), 120u);
  EXPECT_EQ(end.tasks_failed(), 0u);
  auto results = client.Results(*id);
  ASSERT_TRUE(results.ok());
  EXPECT_EQ(nlohmann::json::parse(results->result_json())["paths"].get<uint64_t>(), 150'000'000u);

  // The owner leaves again: the agent resumes and, alone, runs a new job.
  WriteSensors(sensors, 3600);
  EXPECT_TRUE(WaitFor([&] { return shared.Output().find("-> available") != std::string::npos; },
                      seconds(10)))
      << shared.Output();
  dedicated.Kill(SIGKILL);
  auto next = client.Submit(R"({"app":"noop","tasks":20})");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(WaitForJobEnd(client, *next, seconds(60)).state(), "done") << shared.Output();
}

}  // namespace
}  // namespace claw::testing

// Training one model across agents in rounds (app fedtrain), for real: a
// coordinator and agent processes on loopback, libtorch in the workers,
// Fashion-MNIST uploaded by the CLI or kept on an agent.
#include <httplib.h>

#include <csignal>
#include <set>
#include <thread>

#include "common/crypto.h"
#include "privacy/accountant.h"
#include "harness.h"
#include "tests/requirements.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

const std::string kData = FashionMnistDir();

class Fedtrain : public Network {
 protected:
  // A small MLP, quick rounds: `rounds` of 2 workers.
  std::vector<std::string> Submit(int rounds, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "submit", "--app", "fedtrain", "--seed", "7", "-p", "model=mlp", "-p", "width=32",
        "-p", "rounds=" + std::to_string(rounds), "-p", "workers=2", "-p", "overprovision=1",
        "-p", "train_limit=3000", "-p", "test_limit=1000", "-p",
        R"(inner={"steps":40,"batch":32,"lr":0.003})"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  std::string JobIn(const std::string& out) {
    auto at = out.find("j-");
    EXPECT_NE(at, std::string::npos) << out;
    return at == std::string::npos ? "" : out.substr(at, 12);
  }
  nlohmann::json Result(Client& client, const std::string& job) {
    auto r = client.Results(job);
    EXPECT_TRUE(r.ok());
    return r.ok() ? nlohmann::json::parse(r->result_json(), nullptr, false) : nlohmann::json();
  }
  // Three agents; the job of `args` runs until two tasks are done, then one
  // agent is killed; returns the job's end and, in *out, what submit said.
  v1::JobInfo RunKillingOneOfThree(const std::vector<std::string>& args, std::string* job,
                                   std::string* out, seconds limit,
                                   const std::vector<std::string>& agent_args = {}) {
    StartCoordinator();
    StartAgent(1, agent_args);
    StartAgent(1, agent_args);
    Process& doomed = StartAgent(1, agent_args);
    EXPECT_EQ(Claw(args, out), 0) << *out;
    *job = JobIn(*out);
    Client client(target(), seconds(5));
    EXPECT_TRUE(WaitFor([&] {
      auto j = client.GetJob(*job);
      return j.ok() && j->tasks_done() >= 2;
    }, seconds(120)));
    doomed.Kill(SIGKILL);
    return WaitForJobEnd(client, *job, limit);
  }
  static std::string ModelOf(const nlohmann::json& result) {
    for (const auto& f : result["trials"][0]["files"]) {
      if (f["path"] == "model.safetensors") return f["sha256"];
    }
    return "";
  }
};

TEST_F(Fedtrain, RoundsRunOnTwoAgentsAndTheModelServesInference) {
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  StartCoordinator();
  StartAgent();
  StartAgent();
  std::string out;
  auto args = Submit(3, {"--dataset", kData, "--wait"});
  ASSERT_EQ(Claw(args, &out), 0) << out;
  // --wait shows each round, then the curve.
  EXPECT_NE(out.find("round 2/3"), std::string::npos) << out;
  EXPECT_NE(out.find("ROUND  TEST_ACC"), std::string::npos) << out;
  EXPECT_NE(out.find("on 2 devices"), std::string::npos) << out;
  std::string job = JobIn(out);
  Client client(target(), seconds(5));
  nlohmann::json r = Result(client, job);
  ASSERT_EQ(r["curve"].size(), 4u) << r.dump();  // rounds 0..3
  double first = r["curve"][0]["accuracy"], last = r["curve"][3]["accuracy"];
  EXPECT_LT(first, 0.3) << "the initial model guesses";
  EXPECT_GT(last, 0.6) << r["curve"].dump();
  EXPECT_EQ(r["curve"][3]["count"], 1000);
  ASSERT_EQ(r["rounds"].size(), 3u);
  for (const auto& round : r["rounds"]) {
    EXPECT_EQ(round["agents"].size(), 2u);
    // int8 both ways: a delta or an update is about a quarter of the model.
    EXPECT_LT(round["update_bytes"].get<double>(), 0.3 * r["bytes"]["model"].get<double>());
    EXPECT_LT(round["bytes_up"].get<double>(), 2 * 0.3 * r["bytes"]["model"].get<double>());
  }
  // The rounds as JSON over HTTP, for a dashboard (plaintext: --insecure-local).
  httplib::Client http("127.0.0.1", http_port_);
  auto res = http.Get("/api/jobs/" + job + "/rounds");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  auto rounds = nlohmann::json::parse(res->body);
  ASSERT_EQ(rounds["rounds"].size(), 4u) << res->body;  // 0..3
  EXPECT_EQ(rounds["rounds"][3]["model"], ModelOf(r));
  EXPECT_DOUBLE_EQ(rounds["rounds"][3]["eval"]["accuracy"].get<double>(),
                   r["curve"][2]["accuracy"].get<double>());
  EXPECT_EQ(http.Get("/api/jobs/" + job + ".r1/rounds")->status, 400);  // a round has none
  // The model comes back, and serves inference.
  ASSERT_EQ(Claw({"results", job, "--out", (dir_ / "model").string()}, &out), 0) << out;
  EXPECT_TRUE(std::filesystem::exists(dir_ / "model" / "model.safetensors"));
  EXPECT_EQ(Sha256Hex(ReadFile((dir_ / "model" / "model.safetensors").string())), ModelOf(r));
  ASSERT_EQ(Claw({"submit", "--app", "infer", "--model-of", job, "--dataset", kData, "-p",
                  "shards=2", "--wait"},
                 &out),
            0)
      << out;
  EXPECT_NE(out.find("accuracy"), std::string::npos) << out;
  // `claw jobs` lists the training job, not its rounds.
  ASSERT_EQ(Claw({"jobs"}, &out), 0);
  EXPECT_NE(out.find("fedtrain"), std::string::npos) << out;
  EXPECT_EQ(out.find("fedround"), std::string::npos) << out;
}

// kill -9 of the coordinator mid-training: it goes on from the last round,
// and with the same devices reporting in each round the model is the one an
// undisturbed run makes, bit for bit.
TEST_F(Fedtrain, ACoordinatorKilledMidTrainingEndsWithTheUndisturbedModel) {
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  StartCoordinator();
  StartAgent();
  StartAgent();
  Client client(target(), seconds(5));
  std::string out;
  ASSERT_EQ(Claw(Submit(8, {"--dataset", kData, "--wait"}), &out), 0) << out;
  std::string reference = ModelOf(Result(client, JobIn(out)));
  ASSERT_FALSE(reference.empty());

  ASSERT_EQ(Claw(Submit(8, {"--dataset", kData}), &out), 0) << out;
  std::string job = JobIn(out);
  ASSERT_TRUE(WaitFor([&] {
    auto j = client.GetJob(job);
    return j.ok() && j->tasks_done() >= 2;
  }, seconds(120)));
  auto before = client.GetJob(job);
  ASSERT_EQ(before->state(), "running") << "it ended before the kill; make it longer";
  coordinator_->Kill(SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  StartCoordinator();
  v1::JobInfo end = WaitForJobEnd(client, job, seconds(180));
  ASSERT_EQ(end.state(), "done") << end.error() << "\n" << coordinator_->Tail();
  nlohmann::json r = Result(client, job);
  EXPECT_EQ(ModelOf(r), reference) << "killed at round " << before->tasks_done();
  EXPECT_EQ(r["rounds"].size(), 8u);
}

// A dataset that stays on its device: only the agent that has it trains,
// while another agent without it stands by.
TEST_F(Fedtrain, ALocalDatasetIsUsedOnlyWhereItIs) {
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  StartCoordinator();
  StartAgent(1, {"--dataset", "fashion=" + kData});
  StartAgent();
  std::string out;
  ASSERT_EQ(Claw(Submit(2, {"-p", "local_dataset=fashion", "-p", "workers=1", "--wait"}), &out), 0)
      << out;
  Client client(target(), seconds(5));
  nlohmann::json r = Result(client, JobIn(out));
  std::set<std::string> agents;
  for (const auto& round : r["rounds"]) {
    for (const auto& a : round["agents"]) agents.insert(a);
  }
  EXPECT_EQ(agents.size(), 1u) << r.dump();
  EXPECT_GT(r["curve"].back()["accuracy"].get<double>(), 0.5);
  // No dataset blob was uploaded: the coordinator holds the models alone.
  size_t blobs = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(data() + "/blobs")) {
    if (e.is_regular_file() && e.file_size() > 1'000'000) ++blobs;
  }
  EXPECT_EQ(blobs, 0u) << "a file the size of the dataset reached the coordinator";
}

// An agent killed mid-training: the over-provisioned rounds close at their
// quorum with the others, and the job ends.
TEST_F(Fedtrain, RoundsGoOnWhenAnAgentVanishes) {
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  std::string job, out;
  v1::JobInfo end = RunKillingOneOfThree(
      Submit(6, {"--dataset", kData, "-p", "overprovision=1.5", "-p", "quorum=1"}), &job, &out,
      seconds(180));
  Client client(target(), seconds(5));
  ASSERT_EQ(end.state(), "done") << end.error();
  nlohmann::json r = Result(client, job);
  EXPECT_EQ(r["rounds"].size(), 6u);
  for (const auto& round : r["rounds"]) EXPECT_EQ(round["agents"].size(), 2u) << round.dump();
}

// Differential privacy over real rounds: an agent killed mid-training, the
// rounds still close, and each round's ε is what an accountant run on the
// participation that happened gives (docs/privacy.md).
TEST_F(Fedtrain, PrivateRoundsSurviveAVanishedAgentAndCountWhatHappened) {
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  // Three tasks a round (two workers, overprovision 1.5) over eight shards.
  std::string job, out;
  v1::JobInfo end = RunKillingOneOfThree(
      Submit(4, {"--dataset", kData, "-p", "overprovision=1.5", "-p", "shards=8", "-p",
                 R"(privacy={"clip_norm":1,"noise_multiplier":0.8,"epsilon":50})"}),
      &job, &out, seconds(240));
  EXPECT_NE(out.find("privacy: each round spends up to ε = "), std::string::npos) << out;
  EXPECT_NE(out.find("allows 4 of them"), std::string::npos) << out;
  Client client(target(), seconds(5));
  ASSERT_EQ(end.state(), "done") << end.error();
  nlohmann::json r = Result(client, job);
  ASSERT_EQ(r["rounds"].size(), 4u);
  privacy::RdpAccountant accountant;
  for (const auto& round : r["rounds"]) {
    const nlohmann::json& p = round["privacy"];
    ASSERT_TRUE(p.is_object()) << round.dump();
    EXPECT_EQ(p["units"], round["agents"].size());
    EXPECT_GE(p["units"].get<int>(), 2);  // the quorum, even after the kill
    accountant.Compose(p["units"].get<double>() / 8, 0.8);
    EXPECT_NEAR(p["epsilon"].get<double>(), accountant.Epsilon(1e-5).epsilon, 1e-9) << p.dump();
  }
  EXPECT_NEAR(r["privacy"]["epsilon_spent"].get<double>(), accountant.Epsilon(1e-5).epsilon, 1e-9);
  // What the user reads.
  ASSERT_EQ(Claw({"results", job}, &out), 0) << out;
  EXPECT_NE(out.find("EPSILON"), std::string::npos) << out;
  EXPECT_NE(out.find("privacy: ε = "), std::string::npos) << out;
  EXPECT_NE(out.find("secure aggregation off"), std::string::npos) << out;
}

// Secure aggregation over real agents: the deltas stay on the devices,
// the coordinator sums masked vectors; an agent killed mid-training; with
// differential privacy the devices clip and the coordinator adds noise.
// The agents' blob caches are as small as can be: a delta waiting for its
// round's sum is kept all the same.
TEST_F(Fedtrain, SecureRoundsSumMaskedDeltasAcrossAgentsThatComeAndGo) {
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  std::string job, out;
  v1::JobInfo end = RunKillingOneOfThree(
      Submit(3, {"--dataset", kData, "-p", "overprovision=1.5", "-p", "shards=6", "-p",
                 R"(secure_aggregation={"step_s":20})", "-p",
                 R"(privacy={"clip_norm":1,"noise_multiplier":0.5})"}),
      &job, &out, seconds(300), {"--cache-mb", "0"});
  Client client(target(), seconds(5));
  ASSERT_EQ(end.state(), "done") << end.error();
  nlohmann::json r = Result(client, job);
  ASSERT_EQ(r["rounds"].size(), 3u) << r.dump();
  int summed = 0;
  for (const auto& round : r["rounds"]) {
    ASSERT_TRUE(round.contains("secure_aggregation")) << round.dump();
    if (round.contains("abandoned")) continue;
    summed++;
    EXPECT_GE(round["secure_aggregation"]["masked"].get<int>(), 2) << round.dump();
    EXPECT_EQ(round["privacy"]["units"], round["agents"].size());
    EXPECT_EQ(round["privacy"]["secure_aggregation"], true);
    // The noise is calibrated to what a device can add after rounding: at
    // most a tenth above the clip norm with the range worked out for it.
    EXPECT_GT(round["privacy"]["sensitivity"].get<double>(), 1.0) << round.dump();
    EXPECT_LE(round["privacy"]["sensitivity"].get<double>(), 1.1 + 1e-9) << round.dump();
    EXPECT_FALSE(round.contains("train_loss")) << "no training loss is published with privacy";
  }
  EXPECT_GE(summed, 2) << r.dump();
  EXPECT_EQ(r["privacy"]["secure_aggregation"], true);
  // No delta reached the coordinator: its blob store holds the models and
  // the updates it made, the dataset, and nothing of the size of a delta
  // from an agent (the round results name none).
  for (int n = 1; n <= 3; ++n) {
    auto round = client.Results(job + ".r" + std::to_string(n));
    ASSERT_TRUE(round.ok());
    const nlohmann::json round_result = nlohmann::json::parse(round->result_json());
    for (const auto& rep : round_result["reports"]) {
      EXPECT_FALSE(rep.contains("delta")) << rep.dump();
    }
  }
  ASSERT_EQ(Claw({"results", job}, &out), 0) << out;
  EXPECT_NE(out.find("secure aggregation on"), std::string::npos) << out;
}

// split=by_label: shards sorted by label (non-IID). With 10 shards a task
// trains on about one class, so a round of two tasks leaves a model that
// knows about two classes of ten; the same round on IID shards knows all.
TEST_F(Fedtrain, ByLabelShardsHoldFewClassesEach) {
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  StartCoordinator();
  StartAgent();
  StartAgent();
  Client client(target(), seconds(5));
  auto accuracy = [&](const std::string& split) {
    std::string out;
    EXPECT_EQ(Claw(Submit(1, {"--dataset", kData, "-p", "split=" + split, "-p", "shards=10",
                              "--wait"}),
                   &out),
              0)
        << out;
    nlohmann::json r = Result(client, JobIn(out));
    return r["curve"].back()["accuracy"].get<double>();
  };
  double by_label = accuracy("by_label"), iid = accuracy("iid");
  EXPECT_LT(by_label, 0.35) << "a model that saw about two classes";
  EXPECT_GT(iid, 0.5);
}

// A lying agent (its deltas scaled 100 times): each of its deltas is
// refused by the norm check and counted against it, also in a round where
// it ran two of the three tasks; the model trains on.
TEST_F(Fedtrain, ALiarsDeltasAreRefusedAndTheModelTrainsOn) {
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  StartCoordinator();
  StartAgent();
  StartAgent();
  StartAgent(1, {"--misbehave", "scale=100"});
  Client client(target(), seconds(5));
  // Every agent connected before the training starts: rounds this short
  // could otherwise run on the first two alone.
  ASSERT_TRUE(WaitFor([&] {
    auto agents = client.ListAgents();
    return agents.ok() && std::count_if(agents->begin(), agents->end(),
                                        [](const v1::AgentInfo& a) { return a.connected(); }) == 3;
  }, seconds(60)));
  std::string out;
  // Three workers a round, all needed: the liar takes part in every round.
  ASSERT_EQ(Claw(Submit(3, {"--dataset", kData, "-p", "workers=3", "-p",
                            R"(aggregation={"rule":"median","norm_factor":5})", "--wait"}),
                 &out),
            0)
      << out;
  std::string job = JobIn(out);
  nlohmann::json r = Result(client, job);
  ASSERT_EQ(r["rounds"].size(), 3u) << r.dump();
  // Tasks go to whoever asks (an agent has a slot per core), so the liar
  // may run none, one or two of a round's three: two are judged against
  // the other devices' deltas, not each other.
  std::set<std::string> liars;
  size_t refused = 0;
  for (const auto& round : r["rounds"]) {
    for (const auto& x : round["rejected"]) {
      liars.insert(x["agent"].get<std::string>());
      EXPECT_NE(x["why"].get<std::string>().find("norm"), std::string::npos) << x.dump();
      ++refused;
    }
  }
  ASSERT_EQ(liars.size(), 1u) << r.dump();
  for (const auto& round : r["rounds"]) {
    for (const auto& a : round["agents"]) {
      EXPECT_NE(a.get<std::string>(), *liars.begin()) << "a liar's delta was used: " << round.dump();
    }
  }
  auto agents = client.ListAgents();
  ASSERT_TRUE(agents.ok());
  for (const auto& a : *agents) {
    EXPECT_EQ(a.invalid_results(), liars.count(a.agent_id()) ? refused : 0u) << a.agent_id();
  }
  EXPECT_GT(r["curve"].back()["accuracy"].get<double>(), 0.6) << r["curve"].dump();
}

// spot_check=1: every task runs on both agents (neither has a record yet),
// and two honest agents' deltas, made by separate processes, agree.
TEST_F(Fedtrain, HonestAgentsPassEachOthersSpotChecks) {
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  StartCoordinator();
  StartAgent();
  StartAgent();
  std::string out;
  ASSERT_EQ(Claw(Submit(2, {"--dataset", kData, "-p", "spot_check=1", "--wait"}), &out), 0) << out;
  std::string job = JobIn(out);
  Client client(target(), seconds(5));
  nlohmann::json r = Result(client, job);
  ASSERT_EQ(r["rounds"].size(), 2u) << r.dump();
  for (const auto& round : r["rounds"]) EXPECT_EQ(round["rejected"].size(), 0u) << round.dump();
  auto agents = client.ListAgents();
  ASSERT_TRUE(agents.ok());
  ASSERT_EQ(agents->size(), 2u);
  for (const auto& a : *agents) {
    EXPECT_EQ(a.invalid_results(), 0u) << a.agent_id();
    // init, 2 rounds of 2 tasks and the evaluation's 2: each vote counts once per agent.
    EXPECT_GE(a.valid_results(), 6u) << a.agent_id();
  }
}

}  // namespace
}  // namespace claw::testing

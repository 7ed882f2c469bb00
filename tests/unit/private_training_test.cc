// Differential privacy in training rounds, through the coordinator
// (rounds/privacy.h, docs/privacy.md): clipping, noise, the budget spent
// counted on what happened, the budget that stops training, the specs that
// make no sense.
#include "privacy/accountant.h"
#include "tests/unit/round_training.h"

namespace claw {
namespace {

using namespace testing_rounds;  // NOLINT: the fixture's helpers

double Epsilon(double q, double z, int rounds, double delta = 1e-5) {
  privacy::RdpAccountant acc;
  acc.Compose(q, z, rounds);
  return acc.Epsilon(delta).epsilon;
}

json Privacy(double clip, double z, std::optional<double> budget = std::nullopt) {
  json p = {{"clip_norm", clip}, {"noise_multiplier", z}, {"delta", 1e-5}};
  if (budget) p["epsilon"] = *budget;
  return p;
}

class PrivateTraining : public RoundTraining {
 protected:
  // Each sink's task of the current round.
  std::vector<std::pair<Sink*, v1::Assignment>> Round(std::vector<Sink*> sinks) {
    for (Sink* s : sinks) Want(s, 1);
    return Take(sinks);
  }
  void Eval(const std::vector<std::pair<Sink*, v1::Assignment>>& tasks) {
    for (const auto& [sink, a] : tasks) {
      json p = json::parse(a.params());
      ASSERT_EQ(p["kind"], "eval");
      json out = {{"kind", "eval"}, {"task", p["task"]},
                  {"eval", {{"loss_sum", 5.0}, {"correct", 9}, {"count", 10}}},
                  {"files", json::array()}};
      Report(sink, a.lease_id(), out.dump());
    }
    coordinator_->StepTrainings();
  }
};

TEST_F(PrivateTraining, EachRoundClipsAddsNoiseAndCountsTheDevicesThatReported) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  // Four tasks a round over eight shards; the round closes when two report,
  // so two devices of each round vanish without their shard being used.
  auto job = coordinator_->Submit(
      Spec(init, 2, 4, {{"shards", 8}, {"quorum", 0.5}, {"privacy", Privacy(1.0, 1.0)}}).dump(),
      kAlice);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  coordinator_->StepTrainings();
  Sink s[4];
  for (Sink& sink : s) Connect(&sink, 1);
  std::vector<Sink*> all = {&s[0], &s[1], &s[2], &s[3]};
  auto tasks = Take(all);
  ASSERT_EQ(tasks.size(), 4u);
  std::set<uint64_t> shards;
  for (const auto& t : tasks) shards.insert(json::parse(t.second.params())["shard"].get<uint64_t>());
  EXPECT_EQ(shards.size(), 4u) << "a round's shards are distinct";
  EXPECT_LT(*shards.rbegin(), 8u);
  // One delta of norm 50 (clipped to 1), one of norm 0.2 (kept).
  ReportDelta(tasks[0].first, tasks[0].second, Model(25, 0), 10);
  ReportDelta(tasks[1].first, tasks[1].second, Model(0.1f, 0), 10);
  coordinator_->StepTrainings();
  auto rounds = Rounds(*job);
  ASSERT_EQ(rounds.size(), 2u);
  json p = json::parse(rounds[1].info_json)["privacy"];
  EXPECT_EQ(p["units"], 2);
  EXPECT_EQ(p["clipped"], 1);
  EXPECT_DOUBLE_EQ(p["q"].get<double>(), 2.0 / 8);
  EXPECT_EQ(p["noise_added_by"], "coordinator");
  EXPECT_DOUBLE_EQ(p["epsilon"].get<double>(), Epsilon(0.25, 1.0, 1));
  // The model moved by the mean of the clipped deltas plus noise of
  // σ = z·C / 2 on each of its six values: about 0.5·√6 from the mean.
  Weights big = Model(25, 0), mean = rounds::ZerosLike(big);
  rounds::AddScaled(&mean, big, static_cast<float>(0.5 / rounds::Norm(big)));
  rounds::AddScaled(&mean, Model(0.1f, 0), 0.5f);
  Weights noise = Read(rounds[1].model);
  rounds::AddScaled(&noise, Model(1, 2), -1.0f);
  rounds::AddScaled(&noise, mean, -1.0f);
  EXPECT_GT(rounds::Norm(noise), 0.05);
  EXPECT_LT(rounds::Norm(noise), 5.0);

  // Round 2: three report before it closes? It closes at two; the third's
  // late report is stale and spends nothing.
  auto second = Round(all);
  ASSERT_GE(second.size(), 3u);
  for (int i = 0; i < 3; ++i) ReportDelta(second[i].first, second[i].second, Model(0.1f, 0.1f), 10);
  coordinator_->StepTrainings();
  rounds = Rounds(*job);
  ASSERT_EQ(rounds.size(), 3u);
  p = json::parse(rounds[2].info_json)["privacy"];
  EXPECT_EQ(p["units"], 2);
  EXPECT_NEAR(p["epsilon"].get<double>(), Epsilon(0.25, 1.0, 2), 1e-9);
  EXPECT_NEAR(p["round_epsilon"].get<double>(), Epsilon(0.25, 1.0, 1), 1e-9);

  Eval(Round(all));
  auto end = coordinator_->GetResults(*job, kAlice);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->first.state(), "done") << end->first.error();
  json result = json::parse(end->second);
  EXPECT_NEAR(result["privacy"]["epsilon_spent"].get<double>(), Epsilon(0.25, 1.0, 2), 1e-9);
  EXPECT_EQ(result["privacy"]["rounds_private"], 2);
  EXPECT_FALSE(result["privacy"].contains("stopped"));
  EXPECT_EQ(result["rounds"][1]["privacy"]["units"], 2);
}

TEST_F(PrivateTraining, TrainingStopsBeforeTheBudgetAndOneThatCannotAffordARoundIsRefused) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  const double one = Epsilon(0.5, 1.0, 1), two = Epsilon(0.5, 1.0, 2);
  // Two tasks over four shards: q = 1/2.
  auto refused = coordinator_->Submit(
      Spec(init, 5, 2, {{"shards", 4}, {"privacy", Privacy(1.0, 1.0, one / 2)}}).dump(), kAlice);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("params.privacy.epsilon: one round already spends"),
            std::string::npos)
      << refused.status().message();

  auto job = coordinator_->Submit(
      Spec(init, 5, 2, {{"shards", 4}, {"privacy", Privacy(1.0, 1.0, (one + two) / 2)}}).dump(),
      kAlice);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  coordinator_->StepTrainings();
  Sink a, b;
  Connect(&a, 1);
  Connect(&b, 1);
  auto tasks = Take({&a, &b});
  ASSERT_EQ(tasks.size(), 2u);
  for (const auto& [sink, t] : tasks) ReportDelta(sink, t, Model(0.1f, 0.1f), 10);
  coordinator_->StepTrainings();
  // A second round could pass the budget: the model of round 1 is evaluated.
  Eval(Round({&a, &b}));
  auto end = coordinator_->GetResults(*job, kAlice);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->first.state(), "done") << end->first.error();
  json result = json::parse(end->second);
  EXPECT_EQ(result["trials"][0]["rounds"], 1);
  EXPECT_NEAR(result["privacy"]["epsilon_spent"].get<double>(), one, 1e-9);
  EXPECT_LE(result["privacy"]["epsilon_spent"].get<double>(), (one + two) / 2);
  EXPECT_NE(result["privacy"].value("stopped", "").find("after round 1 of 5"), std::string::npos)
      << result["privacy"].dump();
}

TEST_F(PrivateTraining, ParametersThatMakeNoSenseAreRefusedNamingTheField) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  auto refused = [&](json extra) {
    json base = {{"shards", 4}};
    base.update(extra);
    auto r = coordinator_->Submit(Spec(init, 2, 2, base).dump(), kAlice);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  auto with = [](json p) { return json{{"privacy", p}}; };
  EXPECT_NE(refused(with(Privacy(0, 1))).find("params.privacy.clip_norm"), std::string::npos);
  EXPECT_NE(refused(with(Privacy(-1, 1))).find("params.privacy.clip_norm"), std::string::npos);
  EXPECT_NE(refused(with(Privacy(1, -0.5))).find("params.privacy.noise_multiplier"), std::string::npos);
  EXPECT_NE(refused(with(Privacy(1, 0))).find("no differential privacy"), std::string::npos);
  json p = Privacy(1, 1);
  p["delta"] = 1;
  EXPECT_NE(refused(with(p)).find("params.privacy.delta"), std::string::npos);
  p["delta"] = 0;
  EXPECT_NE(refused(with(p)).find("params.privacy.delta"), std::string::npos);
  p["delta"] = "small";
  EXPECT_NE(refused(with(p)).find("params.privacy.delta"), std::string::npos);
  EXPECT_NE(refused(with(Privacy(1, 1, 0))).find("params.privacy.epsilon"), std::string::npos);
  EXPECT_NE(refused(with("on")).find("params.privacy: must be an object"), std::string::npos);
  p = Privacy(1, 1);
  p["sigma"] = 1;
  EXPECT_NE(refused(with(p)).find("params.privacy.sigma: unknown field"), std::string::npos);
  json robust = with(Privacy(1, 1));
  robust["aggregation"] = {{"rule", "median"}};
  EXPECT_NE(refused(robust).find("params.aggregation.rule"), std::string::npos);
  robust["aggregation"] = {{"norm_factor", 3}};
  EXPECT_NE(refused(robust).find("params.aggregation"), std::string::npos);
  json checked = with(Privacy(1, 1));
  checked["spot_check"] = 0.5;
  EXPECT_NE(refused(checked).find("params.spot_check"), std::string::npos);
  json few = with(Privacy(1, 1));
  few["shards"] = 1;
  EXPECT_NE(refused(few).find("params.shards"), std::string::npos) << refused(few);
  EXPECT_TRUE(coordinator_->ListJobs(10, kAlice).empty()) << "nothing stored";
  EXPECT_EQ(refused(with(Privacy(1, 1))), "accepted");
}

}  // namespace
}  // namespace claw

// Training in rounds through the coordinator, in one process: the real
// coordinator, store, blob directory and round driver; agents are played by
// the test, which makes their deltas itself (no libtorch), so that it can
// send exactly the honest, the malformed and the poisoned ones.
#include "tests/unit/round_training.h"

namespace claw {
namespace {

using namespace testing_rounds;  // NOLINT: the fixture's helpers

TEST_F(RoundTraining, ARoundAveragesTheDeltasByTheirSamplesIntoTheNextModel) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  auto job = coordinator_->Submit(Spec(init, 1, 2).dump(), kAlice);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  coordinator_->StepTrainings();
  Sink s1, s2;
  Connect(&s1);
  Connect(&s2);
  auto tasks = Take({&s1, &s2});
  ASSERT_EQ(tasks.size(), 2u) << "round 1: two tasks";
  EXPECT_EQ(json::parse(tasks[0].second.params())["model"], init);
  // Weighted by samples: (1·30 + 4·10) / 40 = 1.75 for every value.
  ReportDelta(tasks[0].first, tasks[0].second, Model(1, 1), 30);
  ReportDelta(tasks[1].first, tasks[1].second, Model(4, 4), 10);
  coordinator_->StepTrainings();
  auto rounds = Rounds(*job);
  ASSERT_EQ(rounds.size(), 2u);
  Weights want = Model(1, 2);
  rounds::AddScaled(&want, Model(1.75f, 1.75f), 1.0f);
  EXPECT_EQ(rounds::ModelBytes(Read(rounds[1].model)), rounds::ModelBytes(want));
  json info = json::parse(rounds[1].info_json);
  EXPECT_EQ(info["reporters"].size(), 2u);
  EXPECT_DOUBLE_EQ(info["eval"]["accuracy"].get<double>(), 0.7);  // round 0's model, 14 of 20
  // The last model is evaluated, then the job ends with the curve.
  auto evals = Take({&s1, &s2});
  ASSERT_EQ(evals.size(), 2u);
  for (const auto& [sink, a] : evals) {
    json p = json::parse(a.params());
    EXPECT_EQ(p["kind"], "eval");
    EXPECT_EQ(p["model"], rounds[1].model);
    json out = {{"kind", "eval"}, {"task", p["task"]},
                {"eval", {{"loss_sum", 5.0}, {"correct", 9}, {"count", 10}}},
                {"files", json::array()}};
    Report(sink, a.lease_id(), out.dump());
  }
  coordinator_->StepTrainings();
  auto end = coordinator_->GetResults(*job, kAlice);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->first.state(), "done") << end->first.error();
  json result = json::parse(end->second);
  ASSERT_EQ(result["curve"].size(), 2u);
  EXPECT_DOUBLE_EQ(result["curve"][1]["accuracy"].get<double>(), 0.9);
  EXPECT_EQ(result["trials"][0]["files"].back()["sha256"], rounds[1].model);
  // The owner may download the final model the coordinator made.
  EXPECT_TRUE(coordinator_->MayReadBlob(rounds[1].model, kAlice).ok());
}

TEST_F(RoundTraining, BadDeltasAreRefusedAndCountAgainstTheirAgentsAndChangeNothing) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  auto job = coordinator_->Submit(
      Spec(init, 1, 3, {{"aggregation", {{"norm_factor", 10}}}}).dump(), kAlice);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  coordinator_->StepTrainings();
  Sink honest1, honest2, liar;
  Connect(&honest1, 1);  // one task each: what goes back to pending is the liar's again
  Connect(&honest2, 1);
  AgentId liar_id = Connect(&liar);
  auto tasks = Take({&honest1, &honest2, &liar});
  ASSERT_EQ(tasks.size(), 3u);
  auto of = [&](Sink* s) {
    for (auto& t : tasks) {
      if (t.first == s) return t.second;
    }
    ADD_FAILURE() << "no task";
    return v1::Assignment();
  };
  auto agents = [&] { return coordinator_->ListAgents().value(); };
  auto invalid = [&](const AgentId& id) {
    for (const auto& a : agents()) {
      if (a.agent_id() == id) return a.invalid_results();
    }
    return uint64_t{0};
  };
  // A NaN, a wrong shape, too many samples: refused when they come.
  Weights nan = Model(1, 1);
  nan[0].values[1] = std::nanf("");
  ReportDelta(&liar, of(&liar), nan, 10);
  EXPECT_EQ(invalid(liar_id), 1u);
  Weights wrong = {{"fc.bias", {3}, {1, 2, 3}}, {"fc.weight", {2, 2}, {1, 2, 3, 4}}};
  ReportDelta(&liar, of(&liar), wrong, 10);  // its lease ended with the first: stale
  EXPECT_EQ(invalid(liar_id), 1u);
  // The task went back to pending; the liar takes it again and lies bigger:
  // finite, well-shaped, a thousand times the others' norm.
  auto again = Take({&honest1, &honest2, &liar});
  ASSERT_EQ(again.size(), 1u);
  ASSERT_EQ(again[0].first, &liar);
  ReportDelta(&honest1, of(&honest1), Model(1, 1), 40);
  ReportDelta(&honest2, of(&honest2), Model(3, 3), 40);
  ReportDelta(&liar, again[0].second, Model(1000, 1000), 40);
  coordinator_->StepTrainings();
  auto rounds = Rounds(*job);
  ASSERT_EQ(rounds.size(), 2u);
  json info = json::parse(rounds[1].info_json);
  ASSERT_EQ(info["rejected"].size(), 1u) << info.dump();
  EXPECT_EQ(info["rejected"][0]["agent"], liar_id);
  EXPECT_NE(info["rejected"][0]["why"].get<std::string>().find("norm"), std::string::npos);
  EXPECT_EQ(invalid(liar_id), 2u);
  // The model is as if the liar had not been there.
  Weights want = Model(1, 2);
  rounds::AddScaled(&want, Model(2, 2), 1.0f);
  EXPECT_EQ(rounds::ModelBytes(Read(rounds[1].model)), rounds::ModelBytes(want));
}

TEST_F(RoundTraining, ARestartedCoordinatorGoesOnFromTheLastRound) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  auto job = coordinator_->Submit(
      Spec(init, 3, 1, {{"compression", "int8"}, {"outer", {{"optimizer", "nesterov"}}}}).dump(),
      kAlice);
  ASSERT_TRUE(job.ok());
  coordinator_->StepTrainings();
  Sink s;
  Connect(&s);
  auto run_round = [&](Sink* sink, float x) {
    auto t = Take({sink});
    ASSERT_EQ(t.size(), 1u);
    ReportDelta(sink, t[0].second, Model(x, -x), 40);
    coordinator_->StepTrainings();
  };
  run_round(&s, 0.5f);
  ASSERT_EQ(Rounds(*job).size(), 2u);
  // Round 2's job is out; the coordinator dies and comes back.
  Start();
  coordinator_->StepTrainings();
  Sink s2;
  Reconnect(&s2, keys_[&s].first, keys_[&s].second);
  run_round(&s2, 0.25f);
  auto rounds = Rounds(*job);
  ASSERT_EQ(rounds.size(), 3u);
  // Round 3 trains from round 2's model, which an agent holding round 1's
  // rebuilds from the compressed update, bit for bit.
  auto t = Take({&s2});
  ASSERT_EQ(t.size(), 1u);
  json p = json::parse(t[0].second.params());
  EXPECT_EQ(p["model"], rounds[2].model);
  EXPECT_EQ(p["base"], rounds[1].model);
  EXPECT_EQ(p["update"], rounds[2].update);
  Weights rebuilt = rounds::Rebuild(Read(rounds[1].model), Read(rounds[2].update));
  EXPECT_EQ(Sha256Hex(rounds::ModelBytes(rebuilt)), rounds[2].model);
  // The update travels as the job's compression says.
  auto update = tensors::ParseSafetensors(blobs_->Load(rounds[2].update, 1 << 20).value());
  ASSERT_TRUE(update.ok());
  EXPECT_EQ(update->metadata["codec"], "int8");
  EXPECT_EQ(update->tensors[0].dtype, tensors::DType::kI8);
}

TEST_F(RoundTraining, ForgedEvaluationsAreRefusedAndAFailedEvaluationLeavesTheModel) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  auto job = coordinator_->Submit(Spec(init, 1, 2, {{"test_limit", 100}}).dump(), kAlice);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  coordinator_->StepTrainings();
  Sink s1, s2;
  Connect(&s1, 1);
  Connect(&s2, 1);
  auto tasks = Take({&s1, &s2});
  ASSERT_EQ(tasks.size(), 2u);
  auto invalid = [&](const AgentId& id) {
    std::vector<v1::AgentInfo> agents = coordinator_->ListAgents().value();
    for (const auto& a : agents) {
      if (a.agent_id() == id) return a.invalid_results();
    }
    return uint64_t{0};
  };
  auto output = [&](const v1::Assignment& a, json eval) {
    json p = json::parse(a.params());
    std::string h = blobs_->Put(tensors::WriteSafetensors(rounds::Encode(Model(1, 1), rounds::Codec::kF32)))
                        .value();
    return json{{"kind", "train"}, {"round", p["round"]}, {"task", p["task"]}, {"delta", h},
                {"samples", 40}, {"train_loss", 0.5}, {"eval", eval},
                {"files", json::array({{{"path", "delta.safetensors"}, {"sha256", h}}})}};
  };
  // Each task evaluates half of the 100 test images: a count beyond its
  // slice would outweigh the other half, and is refused.
  Sink* s1p = tasks[0].first;
  Report(s1p, tasks[0].second.lease_id(),
         output(tasks[0].second, {{"loss_sum", 1.0}, {"correct", 5000}, {"count", 5000}}).dump());
  EXPECT_EQ(invalid(keys_[s1p].first), 1u);
  Want(s1p, 1);
  auto again = Take({&s1, &s2});
  ASSERT_EQ(again.size(), 1u);
  Report(again[0].first, again[0].second.lease_id(),
         output(again[0].second, {{"loss_sum", 10.0}, {"correct", 50}, {"count", 50}}).dump());
  Report(tasks[1].first, tasks[1].second.lease_id(),
         output(tasks[1].second, {{"loss_sum", 10.0}, {"correct", 0}, {"count", 50}}).dump());
  coordinator_->StepTrainings();
  auto rounds = Rounds(*job);
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_DOUBLE_EQ(json::parse(rounds[1].info_json)["eval"]["accuracy"].get<double>(), 0.5);
  // The evaluation: only its first task writes model.pt.
  Want(&s1, 1);
  Want(&s2, 1);
  auto evals = Take({&s1, &s2});
  ASSERT_EQ(evals.size(), 2u);
  auto fail = [&](Sink* sink, LeaseId lease) {
    v1::AgentMessage m;
    auto* f = m.add_failures();
    f->set_lease_id(lease);
    f->set_reason("out of memory");
    SignReports(keys_[sink].first, keys_[sink].second.secret_key, &m);
    coordinator_->OnAgentMessage(sink, m);
  };
  for (const auto& [sink, a] : evals) {
    json p = json::parse(a.params());
    if (p["task"] != 1) {
      fail(sink, a.lease_id());
      continue;
    }
    std::string h = blobs_->Put("not a checkpoint").value();
    json out = {{"kind", "eval"}, {"task", 1},
                {"eval", {{"loss_sum", 1.0}, {"correct", 1}, {"count", 1}}},
                {"files", json::array({{{"path", "model.pt"}, {"sha256", h}}})}};
    uint64_t before = invalid(keys_[sink].first);
    Report(sink, a.lease_id(), out.dump());
    EXPECT_EQ(invalid(keys_[sink].first), before + 1);
  }
  // Every attempt of the evaluation fails: the training still ends done,
  // with its trained model and the reason it has no final accuracy.
  for (int attempt = 0; attempt < 4; ++attempt) {
    for (const auto& [sink, a] : Take({&s1, &s2})) fail(sink, a.lease_id());
    Want(&s1, 1);
    Want(&s2, 1);
  }
  coordinator_->StepTrainings();
  auto end = coordinator_->GetResults(*job, kAlice);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->first.state(), "done") << end->first.error();
  json result = json::parse(end->second);
  EXPECT_NE(result["evaluation_error"].get<std::string>().find("out of memory"), std::string::npos)
      << result.dump();
  EXPECT_EQ(result["trials"][0]["files"].back()["sha256"], rounds[1].model);
}

TEST_F(RoundTraining, CancellingAfterARestartCancelsTheRoundItRuns) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  auto job = coordinator_->Submit(Spec(init, 3, 1).dump(), kAlice);
  ASSERT_TRUE(job.ok());
  coordinator_->StepTrainings();
  // The stored state of a job (rounds are internal: not listed to users).
  auto state_of = [&](const JobId& id) -> std::optional<JobState> {
    RecoveredState state = store_->Load().value();
    for (const JobRecord& r : state.jobs) {
      if (r.id == id) return r.state;
    }
    return std::nullopt;
  };
  EXPECT_EQ(state_of(*job + ".r1"), JobState::kRunning);
  Start();  // the driver has not stepped since: it knows no current round
  ASSERT_TRUE(coordinator_->Cancel(*job, kAlice).ok());
  EXPECT_EQ(state_of(*job + ".r1"), JobState::kCancelled);
  coordinator_->StepTrainings();
  EXPECT_EQ(state_of(*job + ".r2"), std::nullopt);
  EXPECT_EQ(state_of(*job), JobState::kCancelled);
}

// spot_check: a task runs on two agents (always while they have no clean
// record); their deltas are compared within a tolerance, a third agent
// breaks a tie, and the votes go into the agents' reputations.
TEST_F(RoundTraining, SpotChecksCompareTwoAgentsDeltasAndJudgeTheLiar) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  auto job = coordinator_->Submit(Spec(init, 1, 1, {{"spot_check", 1.0}}).dump(), kAlice);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  coordinator_->StepTrainings();
  Sink honest1, liar, honest2;
  AgentId h1 = Connect(&honest1, 1);
  AgentId l = Connect(&liar, 1);
  auto tasks = Take({&honest1, &liar});
  ASSERT_EQ(tasks.size(), 2u) << "the round's one task, on two agents";
  EXPECT_EQ(tasks[0].second.params(), tasks[1].second.params());
  auto results = [&](const AgentId& id) {
    std::vector<v1::AgentInfo> agents = coordinator_->ListAgents().value();
    for (const auto& a : agents) {
      if (a.agent_id() == id) return std::make_pair(a.valid_results(), a.invalid_results());
    }
    return std::make_pair(uint64_t{0}, uint64_t{0});
  };
  for (const auto& [sink, a] : tasks) {
    // Within the checks (finite, right shapes, no norm bound): only a
    // second run of the task can tell it is not the task's delta.
    ReportDelta(sink, a, sink == &liar ? Model(1.2f, 0.9f) : Model(1, 1), 40);
  }
  coordinator_->StepTrainings();
  EXPECT_EQ(Rounds(*job).size(), 1u) << "the two disagree: the round waits for a third";
  AgentId h2 = Connect(&honest2, 1);
  auto third = Take({&honest1, &liar, &honest2});
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].first, &honest2);
  // An honest rerun on another machine differs in the last bits: it agrees.
  Weights close = Model(1, 1);
  close[1].values[0] += 1e-4f;
  ReportDelta(&honest2, third[0].second, close, 40);
  coordinator_->StepTrainings();
  auto rounds = Rounds(*job);
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(results(l), std::make_pair(uint64_t{0}, uint64_t{1}));
  EXPECT_EQ(results(h1).first, 1u);
  EXPECT_EQ(results(h2).first, 1u);
  // The model moved by an honest delta, not the liar's.
  json reporters = json::parse(rounds[1].info_json)["reporters"];
  ASSERT_EQ(reporters.size(), 1u);
  EXPECT_NE(reporters[0]["agent"], l);
  Weights next = Read(rounds[1].model);
  EXPECT_NEAR(next[0].values[0], 2.0f, 1e-3);
  EXPECT_NEAR(next[0].values[1], 3.0f, 1e-3);
}

TEST_F(RoundTraining, ImpossibleSpecsAreRefusedNamingTheField) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  auto refused = [&](json extra) {
    auto r = coordinator_->Submit(Spec(init, 2, 2, extra).dump(), kAlice);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_NE(refused({{"inner", {{"steps", 0}}}}).find("params.inner.steps"), std::string::npos);
  EXPECT_NE(refused({{"quorum", 1.5}}).find("params.quorum"), std::string::npos);
  EXPECT_NE(refused({{"deadline_s", 0}}).find("params.deadline_s"), std::string::npos);
  EXPECT_NE(refused({{"min_workers", 3}}).find("params.min_workers"), std::string::npos);
  EXPECT_NE(refused({{"spot_check", 1.5}}).find("params.spot_check"), std::string::npos);
  EXPECT_NE(refused({{"compression", "int4"}}).find("params.compression"), std::string::npos);
  EXPECT_NE(refused({{"aggregation", {{"rule", "mode"}}}}).find("params.aggregation.rule"),
            std::string::npos);
  EXPECT_NE(refused({{"local_dataset", "home"}}).find("params.dataset"), std::string::npos);
  EXPECT_NE(refused({{"init", "not-a-hash"}}).find("params.init"), std::string::npos);
  EXPECT_NE(refused({{"bogus", 1}}).find("params.bogus: unknown field"), std::string::npos)
      << refused({{"bogus", 1}});
  // Only the coordinator submits rounds.
  auto round = coordinator_->Submit(R"({"app":"fedround","params":{}})", kAlice);
  EXPECT_FALSE(round.ok());
  EXPECT_TRUE(coordinator_->ListJobs(10, kAlice).empty());
}

// What an agent downloads for a round's task: the update alone when it holds
// the model before it, else the model; nothing when it has the model.
TEST_F(RoundTraining, AnAgentHoldingTheLastModelFetchesOnlyTheUpdate) {
  const App* app = apps_.Find("fedround");
  ASSERT_NE(app, nullptr);
  std::string base = Upload(rounds::ModelBytes(Model(1, 2)));
  std::string update = Upload(rounds::ModelBytes(Model(0.5f, 0.5f)));
  std::string model = std::string(64, 'a');  // not here
  json p = {{"kind", "train"}, {"model", model}, {"base", base}, {"update", update},
            {"local_dataset", "home"}};
  EXPECT_EQ(app->BlobsToFetch(p.dump(), *blobs_), std::vector<std::string>{update});
  p["base"] = std::string(64, 'b');  // the agent lacks the model before
  EXPECT_EQ(app->BlobsToFetch(p.dump(), *blobs_), std::vector<std::string>{model});
  p["model"] = base;  // it has the model itself
  EXPECT_TRUE(app->BlobsToFetch(p.dump(), *blobs_).empty());
  // Whatever it may fetch, it may read (what the coordinator allows).
  EXPECT_EQ(app->TaskInputBlobs(p.dump()).size(), 3u);
}

}  // namespace
}  // namespace claw

// The sweep app: planning grids and random searches over another app's
// parameters, running trials through it, and ranking them.
#include "apps/sweep.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "apps/registry.h"
#include "core/job_spec.h"

namespace claw {
namespace {

using nlohmann::json;

// A one-task app whose output reports its params back, with a score.
class ScoreApp final : public App {
 public:
  std::string_view Name() const override { return "score"; }
  Result<std::vector<TaskSpec>> Plan(const JobSpec& spec) const override {
    if (spec.params.contains("x") && !spec.params["x"].is_number()) {
      return InvalidArgument("params.x: must be a number");
    }
    return std::vector<TaskSpec>{{spec.params.dump(), 1}};
  }
  // Like training: "epochs" more epochs from "resume" (a fake checkpoint
  // naming the epochs done), the score improving with epochs.
  Result<std::string> Run(std::string_view p, const RunContext&) const override {
    json params = json::parse(p);
    double x = params.value("x", 0.0), y = params.value("y", 0.0);
    int64_t epochs = params.value("epochs", int64_t{1});
    int64_t from = params.contains("resume") ? checkpoints_.at(params["resume"]) : 0;
    std::string checkpoint = std::string(63, 'c') + static_cast<char>('0' + epochs % 10);
    checkpoints_[checkpoint] = epochs;
    json e = json::array();
    for (int64_t i = from + 1; i <= epochs; ++i) e.push_back({{"epoch", i}});
    double score = -(x - 2) * (x - 2) - y + 0.01 * static_cast<double>(epochs);
    return json{{"params", params},
                {"epochs", e},
                {"final", {{"score", score}}},
                {"files", {{{"path", "model.pt"}, {"sha256", checkpoint}}}}}
        .dump();
  }
  mutable std::map<std::string, int64_t> checkpoints_;
  Result<json> Merge(const JobSpec&, const std::vector<std::string_view>&) const override {
    return json::object();
  }
  bool Equivalent(std::string_view, std::string_view a, std::string_view b) const override {
    return a == b;
  }
};

class SweepTest : public ::testing::Test {
 protected:
  SweepTest() : sweep_({{"score", &score_}}) {
    apps_.Register(std::make_unique<ScoreApp>());
  }
  Result<PlannedJob> Plan(const json& params, uint64_t seed = 1) {
    AppRegistry apps;
    apps.Register(std::make_unique<SweepApp>(std::map<std::string, const App*, std::less<>>{
        {"score", apps_.Find("score")}}));
    return ParseAndPlanJob(json{{"app", "sweep"}, {"seed", seed}, {"params", params}}.dump(), apps);
  }
  ScoreApp score_;
  SweepApp sweep_;
  AppRegistry apps_;
};

TEST_F(SweepTest, AGridIsEveryCombinationOverTheBase) {
  auto p = Plan({{"app", "score"}, {"base", {{"y", 1}}},
                 {"space", {{"x", {0, 1, 2, 3}}, {"z", {"a", "b"}}}}, {"metric", "score"}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->tasks.size(), 8u);
  json first = json::parse(p->tasks[0].params);
  EXPECT_EQ(first["values"], json({{"x", 0}, {"z", "a"}}));
  EXPECT_EQ(json::parse(first["task"].get<std::string>())["y"], 1) << "the base is in every trial";
}

TEST_F(SweepTest, RandomSearchDrawsFromItsDistributionsReproducibly) {
  json params = {{"app", "score"}, {"method", "random"}, {"trials", 50},
                 {"space", {{"x", {{"log_uniform", {0.001, 0.1}}}},
                            {"y", {{"uniform", {0, 1}}}},
                            {"n", {{"int_uniform", {1, 3}}}},
                            {"k", {{"choice", {"sgd", "adam"}}}}}}};
  auto a = Plan(params, 7), b = Plan(params, 7), c = Plan(params, 8);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->tasks.size(), 50u);
  std::set<std::string> ks;
  for (size_t i = 0; i < 50; ++i) {
    json v = json::parse(a->tasks[i].params)["values"];
    EXPECT_GE(v["x"].get<double>(), 0.001);
    EXPECT_LE(v["x"].get<double>(), 0.1);
    EXPECT_GE(v["n"].get<int>(), 1);
    EXPECT_LE(v["n"].get<int>(), 3);
    ks.insert(v["k"].get<std::string>());
    EXPECT_EQ(a->tasks[i].params, b->tasks[i].params) << "same seed, same trials";
  }
  EXPECT_EQ(ks.size(), 2u);
  EXPECT_NE(a->tasks[0].params, c->tasks[0].params);
}

TEST_F(SweepTest, TrialsRunThroughTheInnerAppAndAreRankedByTheMetric) {
  JobSpec spec;
  spec.app = "sweep";
  spec.params = {{"app", "score"}, {"space", {{"x", {0, 1, 2, 3}}}}, {"metric", "score"}};
  auto tasks = sweep_.Plan(spec);
  ASSERT_TRUE(tasks.ok());
  std::vector<std::string> outs;
  for (const auto& t : *tasks) outs.push_back(*sweep_.Run(t.params, {}));
  std::vector<std::string_view> views(outs.begin(), outs.end());
  auto merged = sweep_.Merge(spec, views);
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ((*merged)["best"]["values"]["x"], 2);
  EXPECT_EQ((*merged)["ranking"][0], 2);
  EXPECT_EQ((*merged)["trials"][3]["values"]["x"], 3);
  spec.params["mode"] = "min";
  EXPECT_EQ((*sweep_.Merge(spec, views))["best"]["values"]["x"], 0);
  EXPECT_TRUE(sweep_.Equivalent("", outs[1], outs[1]));
  EXPECT_FALSE(sweep_.Equivalent("", outs[1], outs[2]));
}

TEST_F(SweepTest, BadSweepsNameTheField) {
  auto expect = [&](json params, const std::string& needle) {
    auto p = Plan(params);
    ASSERT_FALSE(p.ok()) << params.dump();
    EXPECT_NE(p.status().message().find(needle), std::string::npos) << p.status().message();
  };
  expect({{"app", "score"}}, "params.space");
  expect({{"app", "nope"}, {"space", {{"x", {1}}}}}, "params.app");
  expect({{"app", "score"}, {"space", {{"x", json::array()}}}}, "params.space.x");
  expect({{"app", "score"}, {"method", "bayes"}, {"space", {{"x", {1}}}}}, "params.method");
  expect({{"app", "score"}, {"method", "random"}, {"space", {{"x", {{"gauss", {0, 1}}}}}}},
         "params.space.x");
  expect({{"app", "score"}, {"space", {{"x", {"one"}}}}}, "params.x");  // the inner app's error
  expect({{"app", "score"}, {"space", {{"a", std::vector<int>(1000, 1)}, {"b", std::vector<int>(1000, 1)}}}},
         "more than");
}

// ASHA driven by hand, as the scheduler would: 9 trials at 1 epoch, the
// top third promoted to 3, the top third of those to 9.
TEST_F(SweepTest, AshaPromotesTheTopThirdAtEachRungFromTheirCheckpoints) {
  JobSpec spec;
  spec.app = "sweep";
  spec.params = {{"app", "score"},
                 {"method", "asha"},
                 {"asha", {{"min_epochs", 1}, {"max_epochs", 9}, {"eta", 3}}},
                 {"space", {{"x", {0, 1, 2, 3, 4, 5, 6, 7, 8}}}},
                 {"metric", "score"}};
  EXPECT_TRUE(sweep_.Grows(spec));
  auto planned = sweep_.Plan(spec);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  ASSERT_EQ(planned->size(), 9u);
  std::vector<std::string> params, outputs;
  for (auto& t : *planned) params.push_back(t.params);
  outputs.resize(params.size());
  // Run tasks in order; after each, ask for more, as Settle does.
  for (size_t i = 0; i < params.size(); ++i) {
    auto out = sweep_.Run(params[i], {});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    outputs[i] = *out;
    std::vector<App::TaskView> view;
    for (size_t k = 0; k < params.size(); ++k) view.push_back({params[k], outputs[k]});
    for (auto& t : sweep_.Expand(spec, view, static_cast<uint32_t>(i))) {
      params.push_back(t.params);
      outputs.emplace_back();
    }
  }
  ASSERT_EQ(params.size(), 9u + 3 + 1) << "9 at rung 0, 3 at rung 1, 1 at rung 2";
  json top = json::parse(params.back());
  EXPECT_EQ(top["rung"], 2);
  EXPECT_EQ(top["values"]["x"], 2) << "the best trial reached the top";
  EXPECT_EQ(json::parse(top["task"].get<std::string>())["epochs"], 9);
  EXPECT_TRUE(json::parse(top["task"].get<std::string>()).contains("resume"));
  std::vector<std::string_view> views(outputs.begin(), outputs.end());
  auto merged = sweep_.Merge(spec, views);
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ((*merged)["trials"].size(), 9u);
  EXPECT_EQ((*merged)["best"]["values"]["x"], 2);
  // 9 x 1 + 3 x 2 more + 1 x 6 more = 21 trial-epochs, against 81 for the grid.
  EXPECT_EQ((*merged)["compute"]["trial_epochs"], 21);
}

#ifdef CLAW_WITH_TORCH
// The seed's example, expressible in one spec: 3 x 4 x 4 x 3 = 144 trials.
TEST(SweepPlan, TheSeedsExampleIsOneSpecOf144Trials) {
  static const AppRegistry apps = BuiltinApps();
  std::string h(64, 'a');
  json spec = {{"app", "sweep"},
               {"params",
                {{"base", {{"dataset", {{"train_images", h}, {"train_labels", h},
                                        {"test_images", h}, {"test_labels", h}}},
                           {"model", "mlp"}}},
                 {"space", {{"lr", {0.001, 0.01, 0.1}}, {"batch", {16, 32, 64, 128}},
                            {"dropout", {0.1, 0.2, 0.3, 0.5}}, {"layers", {2, 4, 8}}}}}}};
  auto p = ParseAndPlanJob(spec.dump(), apps);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->tasks.size(), 144u);
  json last = json::parse(json::parse(p->tasks.back().params)["task"].get<std::string>());
  EXPECT_EQ(last["lr"], 0.1);
  EXPECT_EQ(last["layers"], 8);
  EXPECT_EQ(apps.Find("sweep")->SpecInputBlobs(p->spec), std::vector<std::string>{h});
}

// The example the docs give for it plans too (with a dataset filled in, as
// `claw submit ... --dataset DIR` does), under ASHA.
TEST(SweepPlan, TheShippedSeedExamplePlans144TrialsAtTheFirstRung) {
  static const AppRegistry apps = BuiltinApps();
  std::ifstream f(std::string(CLAW_SOURCE_DIR) + "/examples/ml/seed-sweep.json");
  json spec = json::parse(f);
  std::string h(64, 'b');
  spec["params"]["base"]["dataset"] = {{"train_images", h}, {"train_labels", h},
                                       {"test_images", h}, {"test_labels", h}};
  auto p = ParseAndPlanJob(spec.dump(), apps);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->tasks.size(), 144u);
  EXPECT_TRUE(apps.Find("sweep")->Grows(p->spec));
  EXPECT_EQ(json::parse(json::parse(p->tasks[0].params)["task"].get<std::string>())["epochs"], 1);
}
#endif

}  // namespace
}  // namespace claw

// The train app on real Fashion-MNIST data (Debian's dataset-fashion-mnist),
// on small slices so that it stays fast: it learns, it is deterministic, a
// resumed trial continues exactly where its checkpoint left off, and replicas
// are compared with a tolerance.
#ifdef CLAW_WITH_TORCH
#include "apps/infer.h"
#include "apps/train.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include <filesystem>
#include <fstream>

#include "apps/registry.h"
#include "common/blobs.h"
#include "core/job_spec.h"
#include "tests/requirements.h"

namespace claw {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kData = claw::testing::FashionMnistDir();

class Training : public ::testing::Test {
 protected:
  void SetUp() override {
    CLAW_REQUIRE(claw::testing::NeedFashionMnist());
    root_ = fs::temp_directory_path() / ("claw-train-" + std::to_string(getpid()));
    blobs_ = std::make_unique<BlobDir>(root_.string());
    ASSERT_TRUE(blobs_->Init().ok());
    const std::pair<const char*, const char*> files[] = {
        {"train_images", "train-images-idx3-ubyte.gz"},
        {"train_labels", "train-labels-idx1-ubyte.gz"},
        {"test_images", "t10k-images-idx3-ubyte.gz"},
        {"test_labels", "t10k-labels-idx1-ubyte.gz"}};
    for (auto [key, file] : files) {
      auto h = blobs_->Import(std::string(kData) + "/" + file, 1 << 30);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      dataset_[key] = *h;
    }
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }
  json Trial(json extra) {
    json t = {{"dataset", dataset_}, {"model", "mlp"}, {"width", 64}, {"layers", 1},
              {"lr", 0.05},          {"batch", 32},    {"train_limit", 600},
              {"test_limit", 500},   {"seed", 7}};
    if (extra.is_object()) t.update(extra);
    return t;
  }
  json Run(const json& trial) {
    auto out = app_.Run(trial.dump(), RunContext{blobs_.get()});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? json::parse(*out) : json();
  }
  fs::path root_;
  std::unique_ptr<BlobDir> blobs_;
  json dataset_;
  TrainApp app_;
};

TEST_F(Training, AnMlpOnASmallSliceLearnsWellAboveChance) {
  json out = Run(Trial({{"epochs", 2}}));
  ASSERT_EQ(out["epochs"].size(), 2u);
  double acc = out["final"]["test_accuracy"];
  EXPECT_GT(acc, 0.45) << out.dump();  // chance is 0.10
  EXPECT_LT(out["epochs"][1]["loss"].get<double>(), out["epochs"][0]["loss"].get<double>());
  ASSERT_EQ(out["files"].size(), 1u);
  EXPECT_TRUE(blobs_->Has(out["files"][0]["sha256"].get<std::string>()));
  EXPECT_EQ(app_.OutputBlobs(out.dump()), std::vector<std::string>{out["files"][0]["sha256"]});
}

TEST_F(Training, ASmallCnnTrains) {
  json out = Run(Trial({{"model", "cnn"}, {"width", 8}, {"layers", 2}, {"train_limit", 300},
                        {"test_limit", 200}, {"lr", 0.02}}));
  EXPECT_GT(out["final"]["test_accuracy"].get<double>(), 0.2) << out.dump();
  EXPECT_GT(out["parameters"].get<int64_t>(), 1000);
}

TEST_F(Training, TheSameSeedGivesTheSameRunAndAnotherSeedAnother) {
  json a = Run(Trial({})), b = Run(Trial({})), c = Run(Trial({{"seed", 8}}));
  EXPECT_EQ(a["final"]["loss"], b["final"]["loss"]);
  EXPECT_EQ(a["final"]["test_accuracy"], b["final"]["test_accuracy"]);
  EXPECT_NE(a["final"]["loss"], c["final"]["loss"]);
}

TEST_F(Training, AResumedTrialContinuesFromItsCheckpointExactly) {
  json straight = Run(Trial({{"epochs", 3}}));
  json first = Run(Trial({{"epochs", 1}}));
  std::string checkpoint = first["files"][0]["sha256"];
  json rest = Run(Trial({{"epochs", 3}, {"resume", checkpoint}}));
  EXPECT_EQ(rest["first_epoch"], 2);
  ASSERT_EQ(rest["epochs"].size(), 2u) << "only epochs 2 and 3 run again";
  EXPECT_EQ(rest["final"]["loss"], straight["final"]["loss"]);
  EXPECT_EQ(rest["final"]["test_accuracy"], straight["final"]["test_accuracy"]);
  EXPECT_EQ(app_.TaskInputBlobs(Trial({{"resume", checkpoint}}).dump()).size(), 5u);
}

TEST_F(Training, ADivergingRunIsAResultWithoutAMetricNotAFailure) {
  json out = Run(Trial({{"lr", 9.0}, {"momentum", 0.99}, {"epochs", 3}}));
  EXPECT_EQ(out["diverged"], true) << out.dump();
  EXPECT_FALSE(out["final"].contains("test_accuracy"));
  EXPECT_FALSE(out.contains("files"));
}

TEST_F(Training, BadTrialsAreRefusedWithTheFieldNamed) {
  auto expect = [&](json trial, const std::string& needle) {
    auto r = app_.Run(trial.dump(), RunContext{blobs_.get()});
    ASSERT_FALSE(r.ok()) << trial.dump();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  expect(Trial({{"model", "rnn"}}), "model");
  expect(Trial({{"lr", -1}}), "lr");
  expect(Trial({{"dataset", {{"train_images", "x"}}}}), "dataset");
  std::ofstream(root_ / "junk") << "not a checkpoint";
  auto junk = blobs_->Import((root_ / "junk").string(), 1 << 20);
  expect(Trial({{"resume", *junk}}), "checkpoint");
  json other = Run(Trial({{"model", "cnn"}, {"width", 4}, {"train_limit", 64}, {"test_limit", 64}}));
  expect(Trial({{"resume", other["files"][0]["sha256"]}}), "different model");
}

// A trained model's predictions over the 10,000 test images, in 4 shards,
// merged in order: the same as one pass over all of them.
TEST_F(Training, InferenceOverShardsMergesInOrderWithTheAccuracy) {
  json trained = Run(Trial({{"epochs", 2}}));
  std::string model = trained["files"][0]["sha256"];
  static const AppRegistry apps = BuiltinApps();
  const App* infer = apps.Find("infer");
  ASSERT_NE(infer, nullptr);
  auto plan = [&](int shards) {
    json spec = {{"app", "infer"},
                 {"params", {{"model", model}, {"dataset", dataset_}, {"shards", shards}}}};
    auto p = ParseAndPlanJob(spec.dump(), apps);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return std::move(p).value();
  };
  auto run_all = [&](const PlannedJob& p) {
    std::vector<std::string> outs;
    for (const auto& t : p.tasks) {
      auto o = infer->Run(t.params, RunContext{blobs_.get()});
      EXPECT_TRUE(o.ok()) << o.status().ToString();
      outs.push_back(o.ok() ? *o : "");
    }
    std::vector<std::string_view> views(outs.begin(), outs.end());
    return *infer->Merge(p.spec, views);
  };
  PlannedJob four = plan(4), one = plan(1);
  EXPECT_EQ(four.tasks.size(), 4u);
  EXPECT_EQ(infer->TaskInputBlobs(four.tasks[0].params).size(), 3u) << "model, images, labels";
  json sharded = run_all(four), whole = run_all(one);
  EXPECT_EQ(sharded["count"], 10000);
  EXPECT_EQ(sharded["predictions"], whole["predictions"]);
  EXPECT_EQ(sharded["accuracy"], whole["accuracy"]);
  EXPECT_GT(sharded["accuracy"].get<double>(), 0.45);
  EXPECT_GT(sharded["images_per_second"].get<double>(), 1000);
}

TEST(InferEquivalence, ShardsAgreeWhenNearlyAllPredictionsMatch) {
  InferApp app;
  auto shard = [](std::string predictions) {
    return json{{"begin", 0}, {"end", predictions.size()}, {"predictions", predictions}}.dump();
  };
  std::string p(1000, '3');
  std::string q = p, r = p;
  for (int i = 0; i < 4; ++i) q[i * 100] = '5';   // 0.4% differ
  for (int i = 0; i < 10; ++i) r[i * 50] = '5';   // 1% differ
  EXPECT_TRUE(app.Equivalent("", shard(p), shard(q)));
  EXPECT_FALSE(app.Equivalent("", shard(p), shard(r)));
}

TEST(TrainEquivalence, ReplicasAgreeWithinTheToleranceNotBitForBit) {
  TrainApp app;
  auto result = [](double acc, double loss, int epochs = 1) {
    json e = json::array();
    for (int i = 1; i <= epochs; ++i) e.push_back({{"epoch", i}});
    return json{{"params", {{"lr", 0.1}}}, {"epochs", e},
                {"final", {{"test_accuracy", acc}, {"test_loss", loss}}}}
        .dump();
  };
  EXPECT_TRUE(app.Equivalent("", result(0.850, 0.400), result(0.845, 0.410)));
  EXPECT_FALSE(app.Equivalent("", result(0.850, 0.400), result(0.800, 0.400))) << "5 points apart";
  EXPECT_FALSE(app.Equivalent("", result(0.850, 0.400), result(0.850, 0.600))) << "loss 50% apart";
  EXPECT_FALSE(app.Equivalent("", result(0.850, 0.400), result(0.850, 0.400, 2))) << "other epochs";
}

TEST(TrainPlan, AJobIsOneTrialAndNamesItsBlobs) {
  static const AppRegistry apps = BuiltinApps();
  std::string h(64, 'a');
  json spec = {{"app", "train"},
               {"params", {{"dataset", {{"train_images", h}, {"train_labels", h},
                                        {"test_images", h}, {"test_labels", h}}},
                           {"epochs", 3}}}};
  auto p = ParseAndPlanJob(spec.dump(), apps);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->tasks.size(), 1u);
  EXPECT_EQ(p->spec.replication, 1u);
  EXPECT_EQ(apps.Find("train")->SpecInputBlobs(p->spec), std::vector<std::string>{h});
  spec["params"].erase("dataset");
  auto bad = ParseAndPlanJob(spec.dump(), apps);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("params.dataset"), std::string::npos);
}

// A user's module runs only in the sandbox, so its jobs need agents that
// run exec (those with one); what a script trial resumes from travels both
// ways as blobs.
TEST(ScriptJobs, NeedASandboxAndNameTheirBlobs) {
  static const AppRegistry apps = BuiltinApps();
  const std::string s(64, 'a'), x(64, 'b'), y(64, 'c'), t(64, 'd'), st(64, 'e');
  json train = {{"app", "train"},
                {"params", {{"script", s}, {"data", {{"train_inputs", x}, {"train_targets", y}}}}}};
  auto p = ParseAndPlanJob(train.dump(), apps);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(apps.Find("train")->Needs(p->spec), (std::vector<std::string>{"train", "exec"}));
  JobSpec plain;
  plain.app = "train";
  EXPECT_EQ(apps.Find("train")->Needs(plain), std::vector<std::string>{"train"});

  json sweep = {{"app", "sweep"},
                {"params", {{"app", "train"}, {"base", train["params"]}, {"space", {{"lr", {0.1, 0.01}}}}}}};
  auto ps = ParseAndPlanJob(sweep.dump(), apps);
  ASSERT_TRUE(ps.ok()) << ps.status().ToString();
  EXPECT_EQ(apps.Find("sweep")->Needs(ps->spec), (std::vector<std::string>{"sweep", "train", "exec"}));

  json infer = {{"app", "infer"}, {"params", {{"script", s}, {"trainable", t}, {"data", {{"inputs", x}}}}}};
  auto pi = ParseAndPlanJob(infer.dump(), apps);
  ASSERT_TRUE(pi.ok()) << pi.status().ToString();
  EXPECT_EQ(apps.Find("infer")->Needs(pi->spec), (std::vector<std::string>{"infer", "exec"}));
  std::vector<std::string> blobs = apps.Find("infer")->TaskInputBlobs(pi->tasks[0].params);
  std::sort(blobs.begin(), blobs.end());
  EXPECT_EQ(blobs, (std::vector<std::string>{s, x, t}));

  // A resumed trial fetches the parameters and state it goes on from.
  train["params"]["resume"] = {{"trainable", t}, {"state", st}};
  auto pr = ParseAndPlanJob(train.dump(), apps);
  ASSERT_TRUE(pr.ok()) << pr.status().ToString();
  blobs = apps.Find("train")->TaskInputBlobs(pr->tasks[0].params);
  std::sort(blobs.begin(), blobs.end());
  EXPECT_EQ(blobs, (std::vector<std::string>{s, x, y, t, st}));
  // ... and a finished trial uploads them.
  json output = {{"files", {{{"path", "trainable.safetensors"}, {"sha256", t}, {"size", 1}}}},
                 {"resume", {{"trainable", t}, {"state", st}}}};
  EXPECT_EQ(apps.Find("train")->OutputBlobs(output.dump()), (std::vector<std::string>{t, st}));

  for (const auto& [resume, field] : std::vector<std::pair<json, std::string>>{
           {json(t), "params.resume"},
           {json{{"trainable", t}}, "params.resume"},
           {json{{"trainable", t}, {"state", "nope"}}, "params.resume.state"}}) {
    train["params"]["resume"] = resume;
    auto bad = ParseAndPlanJob(train.dump(), apps);
    ASSERT_FALSE(bad.ok()) << resume.dump();
    EXPECT_NE(bad.status().message().find(field + ":"), std::string::npos) << bad.status().message();
  }
}

}  // namespace
}  // namespace claw
#endif  // CLAW_WITH_TORCH

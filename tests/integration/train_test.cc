// Training through the whole network: the CLI uploads Fashion-MNIST as
// blobs, an agent fetches them once, trains for real on a slice, and the
// trained model comes back as a checked blob.
#include <unistd.h>

#include <fstream>

#include "common/blobs.h"
#include "harness.h"
#include "tests/requirements.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

const std::string kData = FashionMnistDir();

class Train : public Network {};

TEST_F(Train, ATrialRunsOnAnAgentAndItsModelComesBack) {
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  StartCoordinator();
  StartAgent();
  std::string out;
  int code = Claw({"submit", "--app", "train", "--dataset", kData, "-p", "model=mlp", "-p",
                   "width=32", "-p", "train_limit=500", "-p", "test_limit=300", "-p", "epochs=2",
                   "-p", "lr=0.05"},
                  &out);
  ASSERT_EQ(code, 0) << out;
  std::string job = out.substr(out.find("j-"), 12);
  Client client(target(), seconds(5));
  v1::JobInfo end = WaitForJobEnd(client, job, seconds(120));
  ASSERT_EQ(end.state(), "done") << end.error() << "\n" << ReadFile((dir_ / "agent0.log").string());
  auto r = client.Results(job);
  ASSERT_TRUE(r.ok());
  auto result = nlohmann::json::parse(r->result_json());
  ASSERT_EQ(result["trials"].size(), 1u);
  EXPECT_GT(result["trials"][0]["final"]["test_accuracy"].get<double>(), 0.3) << result.dump();
  ASSERT_EQ(Claw({"results", job, "--out", (dir_ / "model").string()}, &out), 0) << out;
  EXPECT_GT(std::filesystem::file_size(dir_ / "model" / "model.pt"), 10'000u);
  // The agent fetched the dataset once, into its cache (which is under its
  // size: the model it made stays there too).
  size_t cached = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ / "agent0" / "blobs")) {
    if (e.is_regular_file()) ++cached;
  }
  EXPECT_EQ(cached, 5u) << "four dataset files and the model it made";
}

// A sweep from one spec on two agents: a ranked table, CSV, and the best
// trial's model downloadable.
TEST_F(Train, ASweepRanksItsTrialsAndTheBestModelDownloads) {
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  StartCoordinator();
  StartAgent();
  StartAgent();
  std::string out;
  // Upload the dataset through a train submission's --dataset, then reuse
  // its blobs in the sweep's base.
  ASSERT_EQ(Claw({"submit", "--app", "train", "--dataset", kData, "-p", "train_limit=64",
                  "-p", "test_limit=64", "-p", "model=mlp", "-p", "width=8"}, &out), 0) << out;
  Client client(target(), seconds(5));
  // The dataset's blobs are named by the files' SHA-256.
  nlohmann::json dataset;
  for (auto [key, file] : {std::pair{"train_images", "train-images-idx3-ubyte.gz"},
                           std::pair{"train_labels", "train-labels-idx1-ubyte.gz"},
                           std::pair{"test_images", "t10k-images-idx3-ubyte.gz"},
                           std::pair{"test_labels", "t10k-labels-idx1-ubyte.gz"}}) {
    dataset[key] = Sha256Hex(ReadFile(std::string(kData) + "/" + file));
  }
  nlohmann::json spec = {
      {"app", "sweep"},
      {"params",
       {{"base", {{"dataset", dataset}, {"model", "mlp"}, {"train_limit", 400},
                  {"test_limit", 200}, {"epochs", 1}}},
        {"space", {{"lr", {0.001, 0.1}}, {"width", {8, 32}}}}}}};
  std::ofstream(dir_ / "sweep.json") << spec.dump();
  ASSERT_EQ(Claw({"submit", (dir_ / "sweep.json").string(), "--wait"}, &out), 0) << out;
  EXPECT_NE(out.find("4 trials"), std::string::npos) << out;
  EXPECT_NE(out.find("TEST_ACC"), std::string::npos) << out;
  std::string job = out.substr(out.find("j-"), 12);
  ASSERT_EQ(Claw({"results", job, "--format", "csv"}, &out), 0) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 5) << out;
  EXPECT_EQ(out.rfind("rank,trial,lr,width", 0), 0u) << out;
  auto r = client.Results(job);
  ASSERT_TRUE(r.ok());
  auto result = nlohmann::json::parse(r->result_json());
  EXPECT_EQ(result["best"]["values"]["lr"], 0.1) << "lr 0.001 barely moves in one epoch";
  ASSERT_EQ(Claw({"results", job, "--best", "--out", (dir_ / "best").string()}, &out), 0) << out;
  EXPECT_TRUE(std::filesystem::exists(dir_ / "best" / "model.pt")) << out;

  // Batch inference with the sweep's best model over the test set, sharded.
  ASSERT_EQ(Claw({"submit", "--app", "infer", "--model-of", job, "--dataset", kData, "-p",
                  "shards=6", "--wait", "--json"},
                 &out),
            0)
      << out;
  auto infer = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(infer["result"]["count"], 10000);
  EXPECT_GT(infer["result"]["accuracy"].get<double>(), 0.3) << out.substr(0, 300);
}

// Every printing path of `claw results` (and `submit --wait`) on a real
// finished job of each ML app. Found from the outside: the printer aborted
// on every finished train job (it read a sweep's "best" from it).
TEST_F(Train, FinishedJobsOfEveryMlAppPrintThroughTheCli) {
  CLAW_REQUIRE(NeedFashionMnist());
  CLAW_REQUIRE(NeedMlBuild());
  StartCoordinator();
  StartAgent();
  std::string out;
  auto submit = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "submit");
    args.push_back("--wait");
    EXPECT_EQ(Claw(args, &out), 0) << out;
    EXPECT_EQ(out.find("terminate called"), std::string::npos) << out;
    return out.substr(out.find("j-"), 12);
  };
  std::string train = submit({"--app", "train", "--dataset", kData, "-p", "model=mlp", "-p",
                              "width=16", "-p", "train_limit=300", "-p", "test_limit=100"});
  EXPECT_NE(out.find("best: trial 0 test_accuracy"), std::string::npos) << out;
  std::ofstream(dir_ / "sweep.json")
      << R"({"app":"sweep","params":{"base":{"model":"mlp","width":8,"train_limit":200,)"
         R"("test_limit":100},"space":{"lr":[0.01,0.1]}}})";
  std::string sweep = submit({(dir_ / "sweep.json").string(), "--dataset", kData});
  std::string infer = submit({"--app", "infer", "--model-of", train, "--dataset", kData, "-p",
                              "shards=2"});
  for (const std::string& job : {train, sweep, infer}) {
    for (std::vector<std::string> how :
         {std::vector<std::string>{}, {"--format", "csv"}, {"--format", "json"}, {"--json"}}) {
      how.insert(how.begin(), {"results", job});
      EXPECT_EQ(Claw(how, &out), 0) << job << " " << how.back() << "\n" << out;
      EXPECT_EQ(out.find("terminate called"), std::string::npos) << out;
      if (how.back() == "--json" || how.back() == "json") {
        EXPECT_TRUE(nlohmann::json::parse(out, nullptr, false).is_object()) << out;
      }
    }
  }
  for (const std::string& job : {train, sweep}) {
    std::string dir = (dir_ / ("best-" + job)).string();
    ASSERT_EQ(Claw({"results", job, "--best", "--out", dir}, &out), 0) << out;
    EXPECT_TRUE(std::filesystem::exists(dir + "/model.pt")) << out;
  }
}

}  // namespace
}  // namespace claw::testing

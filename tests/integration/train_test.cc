// Training through the whole network: the CLI uploads Fashion-MNIST as
// blobs, an agent fetches them once, trains for real on a slice, and the
// trained model comes back as a checked blob.
#include <unistd.h>

#include <fstream>

#include "harness.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

constexpr const char* kData = "/usr/share/datasets/fashion-mnist";

class Train : public Network {};

TEST_F(Train, ATrialRunsOnAnAgentAndItsModelComesBack) {
  if (!std::filesystem::exists(std::string(kData) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "no Fashion-MNIST (apt-get install dataset-fashion-mnist)";
  }
  StartCoordinator();
  StartAgent();
  std::string out;
  int code = Claw({"submit", "--app", "train", "--dataset", kData, "-p", "model=mlp", "-p",
                   "width=32", "-p", "train_limit=500", "-p", "test_limit=300", "-p", "epochs=2",
                   "-p", "lr=0.05"},
                  &out);
  if (code != 0 && out.find("unknown app 'train'") != std::string::npos) {
    GTEST_SKIP() << "built without libtorch";
  }
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
  // The agent fetched the dataset once, into its cache.
  size_t cached = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ / "agent0" / "blobs")) {
    if (e.is_regular_file()) ++cached;
  }
  EXPECT_EQ(cached, 5u) << "four dataset files and the model it made";
}

}  // namespace
}  // namespace claw::testing

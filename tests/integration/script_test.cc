// Users' own models: TorchScript modules made with Debian's PyTorch (as a
// user makes them), trained by `train` jobs on .npy arrays, always inside
// the sandbox (apps/ml_sandbox.h). Hostile modules fail their job with a
// clear error and leave the agent working.
#include <unistd.h>

#include <fstream>

#include "harness.h"
#include "tests/requirements.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;
namespace fs = std::filesystem;

class UserModels : public Network {
 protected:
  // What both tests need: the pieces, the models and data, a coordinator and
  // one agent.
  void Ready() {
    CLAW_REQUIRE(NeedFashionMnist());
    CLAW_REQUIRE(NeedMlBuild());
    CLAW_REQUIRE(NeedSandbox());
    CLAW_REQUIRE(NeedPythonTorch());
    Make();
    StartCoordinator();
    StartAgent();
  }
  // The models and data of tests/integration/models/make.py, in models_.
  void Make() {
    models_ = dir_ / "models";
    std::string cmd = "/usr/bin/python3 " + std::string(CLAW_SOURCE_DIR) +
                      "/tests/integration/models/make.py '" + models_.string() + "' '" +
                      FashionMnistDir() + "' '" + (dir_ / "escaped").string() + "' > '" +
                      (dir_ / "make.log").string() + "' 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << ReadFile((dir_ / "make.log").string());
  }
  // Submits a train job of `model` on `data` (directories under models_);
  // the job's id.
  std::string Submit(const std::string& model, const std::string& data,
                     std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"submit", "--app", "train", "--script",
                                     (models_ / model).string(), "--data", (models_ / data).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    std::string out;
    EXPECT_EQ(Claw(args, &out), 0) << out;
    size_t at = out.find("j-");
    return at == std::string::npos ? "" : out.substr(at, 12);
  }
  fs::path models_;
};

TEST_F(UserModels, AScriptModelTrainsOnNpyArraysAndComesBackWithItsTrainableParameters) {
  Ready();
  if (HasFatalFailure() || IsSkipped()) return;
  Client client(target(), seconds(5));
  // The whole model trains; a second job with the first layer frozen trains
  // only the rest.
  std::string whole = Submit("mlp.pt", "data", {"-p", "epochs=2", "-p", "lr=0.003"});
  std::string frozen = Submit("frozen.pt", "data", {"-p", "epochs=1"});
  for (const std::string& job : {whole, frozen}) {
    v1::JobInfo end = WaitForJobEnd(client, job, seconds(180));
    ASSERT_EQ(end.state(), "done") << end.error() << "\n" << ReadFile((dir_ / "agent0.log").string());
  }
  auto r = client.Results(whole);
  ASSERT_TRUE(r.ok());
  auto trial = nlohmann::json::parse(r->result_json())["trials"][0];
  EXPECT_EQ(trial["epochs"].size(), 2u);
  EXPECT_GT(trial["final"]["test_accuracy"].get<double>(), 0.6) << trial.dump();
  EXPECT_EQ(trial["parameters"], 784 * 64 + 64 + 64 * 10 + 10);
  EXPECT_EQ(trial["trainable_parameters"], trial["parameters"]);
  auto rf = client.Results(frozen);
  ASSERT_TRUE(rf.ok());
  auto ftrial = nlohmann::json::parse(rf->result_json())["trials"][0];
  EXPECT_EQ(ftrial["trainable_parameters"], 64 * 10 + 10) << ftrial.dump();

  // Both files come back; in Python, the trained module's trainable
  // parameters are the safetensors file's, and the frozen layer is exactly
  // the one submitted.
  std::string out;
  ASSERT_EQ(Claw({"results", frozen, "--out", (dir_ / "frozen-out").string()}, &out), 0) << out;
  ASSERT_TRUE(fs::exists(dir_ / "frozen-out" / "model.pt")) << out;
  ASSERT_TRUE(fs::exists(dir_ / "frozen-out" / "trainable.safetensors")) << out;
  std::string check = R"(
import json, struct, sys, numpy as np, torch
d, before = sys.argv[1], torch.jit.load(sys.argv[2])
after = torch.jit.load(d + '/model.pt')
raw = open(d + '/trainable.safetensors', 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n])
names = sorted(k for k in header if k != '__metadata__')
params = dict(after.named_parameters())
for k in names:
    b, e = header[k]['data_offsets']
    v = np.frombuffer(raw[8 + n + b:8 + n + e], dtype='<f4').reshape(header[k]['shape'])
    assert np.array_equal(v, params[k].detach().numpy()), k
same = torch.equal(dict(before.named_parameters())['fc1.weight'], params['fc1.weight'])
moved = not torch.equal(dict(before.named_parameters())['fc2.weight'], params['fc2.weight'])
print(' '.join(names), same, moved)
)";
  std::ofstream(dir_ / "check.py") << check;
  std::string cmd = "/usr/bin/python3 '" + (dir_ / "check.py").string() + "' '" +
                    (dir_ / "frozen-out").string() + "' '" + (models_ / "frozen.pt").string() + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  std::string printed;
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) printed.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << printed;
  EXPECT_EQ(printed, "fc2.bias fc2.weight True True\n");
}

TEST_F(UserModels, BadModelsAndDataFailTheirJobNamingWhyAndTheAgentKeepsWorking) {
  Ready();
  if (HasFatalFailure() || IsSkipped()) return;
  Client client(target(), seconds(5));

  // Refused at submission, by the CLI, before anything is uploaded.
  std::string out;
  EXPECT_NE(Claw({"submit", "--app", "train", "--script", (models_ / "no_step.pt").string(), "--data",
                  (models_ / "data").string()}, &out), 0);
  EXPECT_NE(out.find("no method training_step(inputs: Tensor, targets: Tensor) -> Tensor"),
            std::string::npos) << out;
  EXPECT_EQ(out.find("uploaded"), std::string::npos) << out;

  struct Case {
    std::string model, data, error;
    std::vector<std::string> extra;
  };
  std::vector<Case> cases = {
      {"throws.pt", "data", "model: training_step failed: builtins.RuntimeError: this model refuses to train", {}},
      {"mlp.pt", "short", "train_inputs has 2000 rows, train_targets 1999", {}},
      {"escape.pt", "data", "model: training_step failed: ", {}},
  };
#if !defined(__SANITIZE_ADDRESS__)
  // Under AddressSanitizer the runner's address space is not bounded (its
  // shadow memory needs terabytes), so only a cgroup would stop this one.
  cases.push_back({"hog.pt", "data", "can't allocate memory", {"-p", "memory_mb=1024"}});
#endif
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model + " on " + c.data);
    std::string job = Submit(c.model, c.data, c.extra);
    v1::JobInfo end = WaitForJobEnd(client, job, seconds(180));
    EXPECT_EQ(end.state(), "failed");
    EXPECT_NE(end.error().find(c.error), std::string::npos) << end.error();
  }
  // The escape wrote nothing on the host; the module's own message says
  // what the sandbox denied it.
  EXPECT_FALSE(fs::exists(dir_ / "escaped"));
  // The agent is still there and trains a good model.
  std::string good = Submit("mlp.pt", "data");
  EXPECT_EQ(WaitForJobEnd(client, good, seconds(180)).state(), "done")
      << ReadFile((dir_ / "agent0.log").string());
}

}  // namespace
}  // namespace claw::testing

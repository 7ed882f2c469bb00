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

TEST_F(UserModels, AScriptModelTrainsPredictsAndSendsBackItsTrainableParametersAlone) {
  Ready();
  if (HasFatalFailure() || IsSkipped()) return;
  Client client(target(), seconds(5));
  // The whole model trains; with the first layer frozen, only the rest;
  // with LoRA adapters on a frozen base, only the adapters.
  std::string whole = Submit("mlp.pt", "data", {"-p", "epochs=2", "-p", "lr=0.003"});
  std::string frozen = Submit("frozen.pt", "data.npz", {"-p", "epochs=1"});  // the arrays as an .npz
  std::string lora = Submit("lora.pt", "data.safetensors", {"-p", "epochs=2", "-p", "lr=0.01"});
  for (const std::string& job : {whole, frozen, lora}) {
    v1::JobInfo end = WaitForJobEnd(client, job, seconds(180));
    ASSERT_EQ(end.state(), "done") << end.error() << "\n" << ReadFile((dir_ / "agent0.log").string());
  }
  auto trial_of = [&](const std::string& job) {
    auto r = client.Results(job);
    EXPECT_TRUE(r.ok());
    return r.ok() ? nlohmann::json::parse(r->result_json())["trials"][0] : nlohmann::json();
  };
  auto trial = trial_of(whole), ftrial = trial_of(frozen), ltrial = trial_of(lora);
  EXPECT_EQ(trial["epochs"].size(), 2u);
  EXPECT_GT(trial["final"]["test_accuracy"].get<double>(), 0.6) << trial.dump();
  EXPECT_EQ(trial["parameters"], 784 * 64 + 64 + 64 * 10 + 10);
  EXPECT_EQ(trial["trainable_parameters"], trial["parameters"]);
  EXPECT_EQ(ftrial["trainable_parameters"], 64 * 10 + 10) << ftrial.dump();
  EXPECT_EQ(ltrial["trainable_parameters"], 4 * (784 + 64) + 4 * (64 + 10)) << ltrial.dump();
  EXPECT_GT(ltrial["final"]["test_accuracy"].get<double>(), 0.3) << ltrial.dump();
  // What travels back is the trainable parameters alone: the adapters are
  // a small fraction of the whole model's bytes.
  const double whole_bytes = trial["files"][0]["size"], lora_bytes = ltrial["files"][0]["size"];
  EXPECT_EQ(ltrial["files"].size(), 1u);
  EXPECT_GT(whole_bytes / lora_bytes, 10) << whole_bytes << " vs " << lora_bytes;

  // Only trainable.safetensors comes back; with the submitted module
  // (examples/models/trained.py puts them together), it is the trained
  // model: the frozen layer exactly as submitted, the rest moved.
  std::string out;
  ASSERT_EQ(Claw({"results", frozen, "--out", (dir_ / "frozen-out").string()}, &out), 0) << out;
  ASSERT_TRUE(fs::exists(dir_ / "frozen-out" / "trainable.safetensors")) << out;
  EXPECT_FALSE(fs::exists(dir_ / "frozen-out" / "model.pt")) << out;
  std::string check = R"(
import subprocess, sys, torch
sys.path.insert(0, sys.argv[3])
from trained import read_safetensors
d, module = sys.argv[1], sys.argv[2]
subprocess.run([sys.executable, sys.argv[3] + '/trained.py', module, d + '/trainable.safetensors',
                d + '/trained.pt'], check=True, stdout=subprocess.DEVNULL)
before, after = torch.jit.load(module), torch.jit.load(d + '/trained.pt')
params = dict(after.named_parameters())
names = sorted(read_safetensors(d + '/trainable.safetensors'))
same = torch.equal(dict(before.named_parameters())['fc1.weight'], params['fc1.weight'])
moved = not torch.equal(dict(before.named_parameters())['fc2.weight'], params['fc2.weight'])
print(' '.join(names), same, moved)
)";
  std::ofstream(dir_ / "check.py") << check;
  std::string cmd = "/usr/bin/python3 '" + (dir_ / "check.py").string() + "' '" +
                    (dir_ / "frozen-out").string() + "' '" + (models_ / "frozen.pt").string() + "' '" +
                    CLAW_SOURCE_DIR + "/examples/models' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  std::string printed;
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) printed.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << printed;
  EXPECT_EQ(printed, "fc2.bias fc2.weight True True\n");

  // infer with the trained model (the module and its trained parameters,
  // --model-of) on the test rows, in 3 shards: the accuracy the training
  // measured on the same rows, exactly.
  ASSERT_EQ(Claw({"submit", "--app", "infer", "--model-of", whole, "--data", (models_ / "data").string(),
                  "-p", "shards=3", "--wait"}, &out), 0) << out;
  EXPECT_NE(out.find("500 rows predicted"), std::string::npos) << out;
  std::string job = out.substr(out.rfind("j-"), 12);
  auto r = client.Results(job);
  ASSERT_TRUE(r.ok());
  auto inferred = nlohmann::json::parse(r->result_json());
  EXPECT_EQ(inferred["predictions"].size(), 500u);
  EXPECT_NEAR(inferred["accuracy"].get<double>(), trial["final"]["test_accuracy"].get<double>(), 1e-9)
      << inferred.dump().substr(0, 300);
  EXPECT_EQ(inferred["files"].size(), 3u);
}

// ASHA over a script model: the promoted trial goes on from its rung's
// parameters and optimizer state, and ends exactly where one uninterrupted
// run of as many epochs ends.
TEST_F(UserModels, ASweepResumesItsPromotedTrialsExactly) {
  Ready();
  if (HasFatalFailure() || IsSkipped()) return;
  Client client(target(), seconds(5));
  std::ofstream(dir_ / "sweep.json")
      << R"({"app":"sweep","params":{"app":"train","method":"asha",)"
         R"("asha":{"min_epochs":1,"max_epochs":2,"eta":2},"space":{"lr":[0.0003,0.003]}}})";
  std::string out;
  ASSERT_EQ(Claw({"submit", (dir_ / "sweep.json").string(), "--script", (models_ / "mlp.pt").string(),
                  "--data", (models_ / "data").string(), "--wait"}, &out), 0) << out;
  std::string sweep = out.substr(out.find("j-"), 12);
  auto r = client.Results(sweep);
  ASSERT_TRUE(r.ok());
  auto result = nlohmann::json::parse(r->result_json());
  const nlohmann::json* promoted = nullptr;
  for (const auto& t : result["trials"]) {
    if (t.value("rung", 0) == 1) promoted = &t;
  }
  ASSERT_NE(promoted, nullptr) << result.dump().substr(0, 2000);
  EXPECT_EQ((*promoted)["first_epoch"], 2) << promoted->dump();
  ASSERT_EQ((*promoted)["epochs"].size(), 1u) << promoted->dump();
  const double lr = (*promoted)["values"]["lr"];
  std::string straight = Submit("mlp.pt", "data", {"-p", "epochs=2", "-p", "lr=" + std::to_string(lr)});
  v1::JobInfo end = WaitForJobEnd(client, straight, seconds(180));
  ASSERT_EQ(end.state(), "done") << end.error();
  auto s = client.Results(straight);
  ASSERT_TRUE(s.ok());
  auto trial = nlohmann::json::parse(s->result_json())["trials"][0];
  EXPECT_EQ((*promoted)["final"]["test_loss"].get<double>(), trial["final"]["test_loss"].get<double>())
      << promoted->dump() << "\n" << trial.dump();
  EXPECT_EQ((*promoted)["final"]["test_accuracy"], trial["final"]["test_accuracy"]);
}

// Round-based training of users' modules on two agents: the model is the
// module's trainable parameters, so LoRA rounds send adapters alone; the
// result is usable by infer.
TEST_F(UserModels, RoundsTrainAScriptModelAndLoraRoundsSendOnlyAdapters) {
  Ready();
  if (HasFatalFailure() || IsSkipped()) return;
  StartAgent();
  Client client(target(), seconds(5));
  auto fed = [&](const std::string& model, const std::string& lr) {
    std::string out;
    EXPECT_EQ(Claw({"submit", "--app", "fedtrain", "--script", (models_ / model).string(), "--data",
                    (models_ / "data").string(), "-p", "rounds=3", "-p", "workers=2", "-p",
                    "overprovision=1", "-p", R"(inner={"steps":40,"batch":32,"lr":)" + lr + "}", "--wait"},
                   &out), 0) << out;
    size_t at = out.find("j-");
    return at == std::string::npos ? std::string() : out.substr(at, 12);
  };
  std::string whole = fed("mlp.pt", "0.003"), lora = fed("lora.pt", "0.01");
  ASSERT_FALSE(whole.empty());
  ASSERT_FALSE(lora.empty());
  auto result_of = [&](const std::string& job) {
    auto r = client.Results(job);
    EXPECT_TRUE(r.ok()) << job;
    return r.ok() ? nlohmann::json::parse(r->result_json()) : nlohmann::json();
  };
  auto w = result_of(whole), l = result_of(lora);
  ASSERT_EQ(w["curve"].size(), 4u) << w.dump().substr(0, 1000);  // before each round, and the final model
  EXPECT_GT(w["curve"].back()["accuracy"].get<double>(), 0.6) << w["curve"].dump();
  EXPECT_GT(w["curve"].back()["accuracy"].get<double>(), w["curve"][0]["accuracy"].get<double>() + 0.3);
  EXPECT_EQ(w["trials"][0]["params"]["script"].is_string(), true) << w["trials"][0].dump();
  EXPECT_GT(l["curve"].back()["accuracy"].get<double>(), l["curve"][0]["accuracy"].get<double>())
      << l["curve"].dump();
  // The deltas of LoRA rounds are the adapters': int8 of 3,688 values
  // against 50,890.
  const double up_whole = w["bytes"]["up"], up_lora = l["bytes"]["up"];
  EXPECT_GT(up_whole / up_lora, 8) << up_whole << " vs " << up_lora;

  // infer with the trained module: the final round's accuracy on the same rows.
  std::string out;
  ASSERT_EQ(Claw({"submit", "--app", "infer", "--model-of", whole, "--data", (models_ / "data").string(),
                  "-p", "shards=1", "--wait"}, &out), 0) << out;
  std::string job = out.substr(out.rfind("j-"), 12);
  auto inferred = result_of(job);
  EXPECT_NEAR(inferred["accuracy"].get<double>(), w["curve"].back()["accuracy"].get<double>(), 1e-9)
      << inferred.dump().substr(0, 300);
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

// The language model example (examples/lm/) end to end, as its README runs
// it but small: a byte-level transformer pre-trained on Debian's fortunes
// by a train job reading token files, then fine-tuned on the licence texts
// with LoRA as a sweep over ranks and as rounds across two agents (on the
// text each agent keeps as its own dataset), and sampled from.
#include <fstream>
#include <set>

#include "harness.h"
#include "tests/requirements.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;
namespace fs = std::filesystem;

class LanguageModel : public Network {
 protected:
  // Runs one of examples/lm's scripts in dir_; its output.
  std::string Example(const std::string& script, const std::string& args) {
    const std::string log = (dir_ / (script + ".log")).string();
    std::string cmd = "cd '" + dir_.string() + "' && /usr/bin/python3 " + std::string(CLAW_SOURCE_DIR) +
                      "/examples/lm/" + script + " " + args + " > '" + log + "' 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << ReadFile(log);
    return ReadFile(log);
  }
  nlohmann::json ResultOf(Client& client, const std::string& job) {
    auto r = client.Results(job);
    EXPECT_TRUE(r.ok()) << job;
    return r.ok() ? nlohmann::json::parse(r->result_json()) : nlohmann::json();
  }
  static std::string JobIn(const std::string& out) {
    size_t at = out.find("j-");
    return at == std::string::npos ? std::string() : out.substr(at, 12);
  }
};

// Loss per token of a model that knows nothing: ln 256.
constexpr double kUniform = 5.545;

TEST_F(LanguageModel, PretrainsOnTokenFilesFineTunesWithLoraAsASweepAndInRoundsAndSamples) {
  CLAW_REQUIRE(NeedMlBuild());
  CLAW_REQUIRE(NeedSandbox());
  CLAW_REQUIRE(NeedPythonTorch());
  CLAW_REQUIRE(NeedFortunes());
  Example("corpus.py", "corpus");
  Example("model.py", "lm.pt --dim 32 --layers 1 --heads 2 --block 32");
  if (HasFailure()) return;
  StartCoordinator();
  // Each agent keeps the licence texts as a dataset of its own.
  const std::string licences = "licences=" + (dir_ / "corpus/finetune").string();
  StartAgent(1, {"--dataset", licences});
  StartAgent(1, {"--dataset", licences});
  Client client(target(), seconds(5));

  // Pre-training: one train job on the fortunes, read as rows of 32 tokens.
  std::string out;
  ASSERT_EQ(Claw({"submit", "--app", "train", "--script", (dir_ / "lm.pt").string(), "--data",
                  (dir_ / "corpus/pretrain").string(), "-p", "block=32", "-p", "epochs=2", "-p",
                  "train_limit=3000", "-p", "test_limit=300", "-p", "lr=0.003", "-p", "batch=32",
                  "--wait"}, &out), 0) << out;
  const std::string pretrain = JobIn(out);
  auto p = ResultOf(client, pretrain)["trials"][0];
  ASSERT_EQ(p["epochs"].size(), 2u) << p.dump().substr(0, 1000);
  const double first = p["epochs"][0]["test_loss"], second = p["epochs"][1]["test_loss"];
  EXPECT_LT(first, kUniform - 1.5) << p["epochs"].dump();  // it learnt the bytes of English
  EXPECT_LT(second, first) << p["epochs"].dump();
  ASSERT_EQ(Claw({"results", pretrain, "--out", (dir_ / "pretrained").string()}, &out), 0) << out;

  // LoRA modules of ranks 2 and 4 on the pre-trained model, swept with two
  // learning rates on the licences; the spec names the modules by path.
  Example("model.py", "lora2.pt --lora 2 --base lm.pt --trainable pretrained/trainable.safetensors");
  Example("model.py", "lora4.pt --lora 4 --base lm.pt --trainable pretrained/trainable.safetensors");
  std::ofstream(dir_ / "sweep.json")
      << R"({"app":"sweep","params":{"app":"train","metric":"test_loss","mode":"min",)"
         R"("base":{"block":32,"epochs":1,"train_limit":1000,"test_limit":300,"batch":32},)"
         R"("space":{"script":["lora2.pt","lora4.pt"],"lr":[0.003,0.03]}}})";
  ASSERT_EQ(Claw({"submit", (dir_ / "sweep.json").string(), "--data", (dir_ / "corpus/finetune").string(),
                  "--wait"}, &out), 0) << out;
  auto sweep = ResultOf(client, JobIn(out));
  ASSERT_EQ(sweep["trials"].size(), 4u) << sweep.dump().substr(0, 2000);
  std::set<int64_t> trainable;
  for (const auto& t : sweep["trials"]) {
    ASSERT_TRUE(t.contains("final")) << t.dump().substr(0, 1000);
    trainable.insert(t["trainable_parameters"].get<int64_t>());
    // What travels is the adapters: rank × (32 + 32) × 2 layers.
    EXPECT_LT(t["trainable_parameters"].get<int64_t>(), t["parameters"].get<int64_t>() / 10) << t.dump();
  }
  EXPECT_EQ(trainable, (std::set<int64_t>{2 * 64 * 2, 4 * 64 * 2}));

  // Rounds across the two agents on the text each keeps (read in place,
  // never uploaded): rank-4 adapters, DiLoCo on int8 deltas.
  ASSERT_EQ(Claw({"submit", "--app", "fedtrain", "--script", (dir_ / "lora4.pt").string(), "-p",
                  "local_dataset=licences", "-p", "block=32", "-p", "rounds=3", "-p",
                  "workers=2", "-p", "overprovision=1", "-p", "test_limit=300", "-p",
                  R"(inner={"steps":30,"batch":32,"lr":0.03})", "--wait"}, &out), 0) << out;
  const std::string fed = JobIn(out);
  auto f = ResultOf(client, fed);
  ASSERT_EQ(f["curve"].size(), 4u) << f.dump().substr(0, 1000);
  const double before = f["curve"][0]["loss"], after = f["curve"].back()["loss"];
  EXPECT_LT(after, before) << f["curve"].dump();
  // Each device sent int8 adapters: fewer bytes than the model has parameters.
  const double up = f["bytes"]["up"];
  EXPECT_LT(up / (3 * 2), p["parameters"].get<double>()) << f["bytes"].dump();

  // Text from the fine-tuned model.
  ASSERT_EQ(Claw({"results", fed, "--out", (dir_ / "tuned").string()}, &out), 0) << out;
  std::string text = Example("sample.py", "lora4.pt tuned/model.safetensors --tokens 64 --prompt 'The '");
  EXPECT_GE(text.size(), 64u + 4) << text;
}

}  // namespace
}  // namespace claw::testing

// The data a user's module names (core/model_data.h): arrays or token
// files, each mistake named by its field.
#include "core/model_data.h"

#include <gtest/gtest.h>

#include "rounds/training_spec.h"

namespace claw {
namespace {

using nlohmann::json;

const std::string kA(64, 'a'), kB(64, 'b'), kC(64, 'c'), kD(64, 'd');

TEST(ModelData, ArraysOrTokenFilesWithTheirBlock) {
  auto arrays = CheckModelData({{"data", {{"train_inputs", kA}, {"train_targets", kB}}}}, "params", false);
  ASSERT_TRUE(arrays.ok()) << arrays.status().ToString();
  EXPECT_EQ(arrays->block, 0);
  auto tokens = CheckModelData({{"data", {{"train_tokens", kA}, {"test_tokens", kB}}}, {"block", 64}},
                               "params", true);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  EXPECT_EQ(tokens->block, 64);
  EXPECT_EQ(tokens->data["test_tokens"], kB);
  EXPECT_EQ(ModelDataFile("train_tokens"), "train.tokens");
  EXPECT_EQ(ModelDataFile("test_inputs"), "test_inputs.npy");
}

TEST(ModelData, MistakesNameTheirField) {
  const json tokens = {{"train_tokens", kA}, {"test_tokens", kB}};
  const struct {
    json params;
    bool need_test;
    std::string error;
  } cases[] = {
      {json::object(), false, "params.data: {\"train_inputs\""},
      {{{"data", tokens}}, false, "params.block: required with token files"},
      {{{"data", tokens}, {"block", 0}}, false, "params.block: the tokens in a row, an integer from 1 to 65536"},
      {{{"data", tokens}, {"block", "128"}}, false, "params.block: the tokens in a row"},
      {{{"data", {{"train_inputs", kA}, {"train_targets", kB}}}, {"block", 8}}, false,
       "params.block: for token files (data.train_tokens) alone"},
      {{{"data", {{"train_tokens", kA}, {"train_inputs", kB}}}, {"block", 8}}, false,
       "params.data.train_inputs: unknown beside token files"},
      {{{"data", {{"train_tokens", kA}}}, {"block", 8}}, true, "params.data.test_tokens: required"},
      {{{"data", {{"test_tokens", kA}}}, {"block", 8}}, false, "params.data.train_tokens: required"},
      {{{"data", {{"train_tokens", "not a hash"}}}, {"block", 8}}, false,
       "params.data.train_tokens: must be a blob's SHA-256"},
      {{{"data", {{"train_inputs", kA}, {"train_targets", kB}, {"test_inputs", kC}}}}, false,
       "test_inputs and test_targets go together"},
      {{{"data", {{"train_inputs", kA}, {"train_targets", kB}, {"labels", kD}}}}, false,
       "params.data.labels: unknown"},
  };
  for (const auto& c : cases) {
    auto r = CheckModelData(c.params, "params", c.need_test);
    ASSERT_FALSE(r.ok()) << c.params.dump();
    EXPECT_NE(r.status().message().find(c.error), std::string::npos)
        << c.params.dump() << "\nwant: " << c.error << "\ngot: " << r.status().message();
  }
}

// Training in rounds on token files: the block travels with the module,
// the test text is required (rounds evaluate on it), labels there are none.
TEST(ModelData, RoundsOfTokenFilesKeepTheirBlockAndNeedTheirTestText) {
  json p = {{"script", kA}, {"data", {{"train_tokens", kB}, {"test_tokens", kC}}}, {"block", 32},
            {"rounds", 2}, {"workers", 2}, {"inner", {{"steps", 10}}}};
  auto s = rounds::ParseTrainingSpec(p);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->arch["block"], 32);
  EXPECT_EQ(s->ToJson()["data"]["test_tokens"], kC);
  auto refused = [&](json change) {
    json q = p;
    q.merge_patch(change);
    auto r = rounds::ParseTrainingSpec(q);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_NE(refused({{"data", {{"test_tokens", nullptr}}}}).find("params.data.test_tokens: required"),
            std::string::npos);
  EXPECT_NE(refused({{"split", "by_label"}}).find("params.split: by_label needs class labels"), std::string::npos);
  EXPECT_NE(refused({{"block", nullptr}}).find("params.block: required"), std::string::npos);
  EXPECT_NE(refused({{"script", nullptr}, {"data", nullptr}, {"local_dataset", "fm"}, {"block", 32}})
                .find("params.block: for a script model"),
            std::string::npos);
  // An agent's own text: the block says its files are train.tokens and test.tokens.
  json l = p;
  l.erase("data");
  l["local_dataset"] = "letters";
  auto ls = rounds::ParseTrainingSpec(l);
  ASSERT_TRUE(ls.ok()) << ls.status().ToString();
  EXPECT_EQ(ls->arch["block"], 32);
}

}  // namespace
}  // namespace claw

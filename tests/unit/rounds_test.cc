// Tensors in safetensors files, delta compression, and a round's
// aggregation (src/tensors, src/rounds; ADR 0007).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "rounds/aggregation.h"
#include "rounds/weights.h"
#include "tensors/safetensors.h"

namespace claw {
namespace {

using namespace claw::rounds;
using namespace claw::tensors;

Weights Model(std::vector<float> a, std::vector<float> b) {
  return {Named{"fc.bias", {static_cast<int64_t>(a.size())}, std::move(a)},
          Named{"fc.weight", {1, static_cast<int64_t>(b.size())}, std::move(b)}};
}

// The header of a file `WriteSafetensors` made, replaced by `json`.
std::string WithHeader(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + data;
}

TEST(Safetensors, RoundTripsEveryDtypeWithMetadataAndAlignedData) {
  TensorFile f;
  f.metadata["codec"] = "int8";
  f.tensors.push_back(FloatTensor("w", {2, 3}, {1, 2, 3, 4, 5, 6}));
  Tensor h{"h", DType::kF16, {2}, std::string("\x00\x3c\x00\xc0", 4)};  // 1.0, -2.0
  Tensor q{"q", DType::kI8, {3}, std::string("\x01\xff\x7f", 3)};
  f.tensors.push_back(h);
  f.tensors.push_back(q);
  std::string bytes = WriteSafetensors(f);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "the data starts 8-byte aligned";
  auto back = ParseSafetensors(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->metadata, f.metadata);
  ASSERT_EQ(back->tensors.size(), 3u);
  EXPECT_EQ(back->Find("w")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(back->Find("h")->data, h.data);
  EXPECT_EQ(back->Find("q")->data, q.data);
  EXPECT_EQ(*ToFloats(*back->Find("h")), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(WriteSafetensors(*back), bytes) << "equal contents, equal bytes";
}

TEST(Safetensors, RefusesEveryLieNamingWhatIsWrong) {
  const std::string six(24, '\0');  // 6 × F32
  struct Case {
    std::string bytes, error;
  };
  std::vector<Case> cases = {
      {"abc", "shorter than its 8-byte header length"},
      {WithHeader("{}", "").substr(0, 9), "header of 2 bytes in a file of 9"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "header of"},
      {WithHeader("[1]", ""), "not a JSON object"},
      {WithHeader("{\"w\"", ""), "not a JSON object"},
      {WithHeader(R"({"w":{"dtype":"C64","shape":[3],"data_offsets":[0,24]}})", six),
       "tensor w: dtype C64 is not supported"},
      {WithHeader(R"({"w":{"dtype":"BF16","shape":[6],"data_offsets":[0,24]}})", six),
       "tensor w: data_offsets [0, 24] do not hold 6 elements of BF16"},
      {WithHeader(R"({"w":{"dtype":"F32","shape":[-6],"data_offsets":[0,24]}})", six),
       "tensor w: shape: sizes must be integers >= 0"},
      {WithHeader(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,24]}})", six),
       "tensor w: shape: more than"},
      {WithHeader(R"({"w":{"dtype":"F32","shape":[7],"data_offsets":[0,24]}})", six),
       "tensor w: data_offsets [0, 24] do not hold 7 elements of F32"},
      {WithHeader(R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}})", six + "x"),
       "1 bytes after the last tensor"},
      {WithHeader(R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}})", six.substr(4)),
       "tensor w ends at byte 24 of 20"},
      {WithHeader(R"({"a":{"dtype":"F32","shape":[6],"data_offsets":[0,24]},)"
                  R"("b":{"dtype":"F32","shape":[1],"data_offsets":[20,24]}})",
                  six),
       "tensor b starts at byte 20, not 24 (a gap or an overlap)"},
      {WithHeader(R"({"w":{"dtype":"F32","shape":[6],"data_offsets":[4,28]}})", six + "1234"),
       "tensor w starts at byte 4, not 0"},
      {WithHeader(R"({"w":{"dtype":"F32","shape":[6]}})", six), "tensor w: must be"},
      {WithHeader(R"({"__metadata__":{"scale:w":1}})", ""), "__metadata__.scale:w must be a string"},
  };
  for (const auto& c : cases) {
    auto r = ParseSafetensors(c.bytes);
    ASSERT_FALSE(r.ok()) << c.error;
    EXPECT_NE(r.status().message().find(c.error), std::string::npos)
        << "got: " << r.status().message() << "\nwanted: " << c.error;
  }
  ParseLimits few;
  few.max_tensors = 1;
  auto two = ParseSafetensors(WriteSafetensors(TensorFile{{}, {FloatTensor("a", {1}, {1}),
                                                               FloatTensor("b", {1}, {2})}}),
                              few);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("more than 1 tensors"), std::string::npos);
}

TEST(Half, ConvertsExactlyWithRoundingToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff) << "below the midpoint to infinity";
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00) << "the midpoint rounds to even: infinity";
  EXPECT_EQ(FloatToHalf(1e10f), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001) << "the smallest subnormal";
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000) << "half of it: ties to even, zero";
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400) << "the smallest normal";
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00) << "tie: to even";
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02) << "tie: to even";
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  // Every half survives the way there and back.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(Codec, EachCodecDecodesWhatItEncodedWithinItsPrecision) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 0.01f);
  std::vector<float> a(100), b(1000);
  for (float& x : a) x = normal(rng);
  for (float& x : b) x = normal(rng);
  Weights w = Model(a, b);
  for (auto [codec, bytes_per_value, tolerance] :
       {std::tuple{Codec::kF32, 4.0, 0.0}, {Codec::kF16, 2.0, 1e-3}, {Codec::kI8, 1.0, 1.0 / 127}}) {
    std::string file = WriteSafetensors(Encode(w, codec));
    EXPECT_LT(static_cast<double>(file.size()), bytes_per_value * 1100 + 400) << CodecName(codec);
    auto parsed = ParseSafetensors(file);
    ASSERT_TRUE(parsed.ok());
    auto back = Decode(*parsed);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ASSERT_TRUE(SameShapes(w, *back).ok());
    for (size_t k = 0; k < w.size(); ++k) {
      float max = 0;
      for (float x : w[k].values) max = std::max(max, std::fabs(x));
      for (size_t i = 0; i < w[k].values.size(); ++i) {
        ASSERT_NEAR((*back)[k].values[i], w[k].values[i], tolerance * max + 1e-12)
            << CodecName(codec) << " " << w[k].name << "[" << i << "]";
      }
    }
  }
}

TEST(Codec, ErrorFeedbackLosesNothingForGoodOverRounds) {
  // The same small delta every round: int8 alone rounds 0.001 next to 1.0
  // to zero for ever; with error feedback the decoded sum keeps up.
  Weights w = Model({0.5f, 0.001f, -1.0f}, {0.25f});
  Weights residual;
  double sent = 0, plain = 0;
  for (int round = 1; round <= 50; ++round) {
    auto decoded = Decode(Encode(w, Codec::kI8, &residual));
    auto alone = Decode(Encode(w, Codec::kI8));
    ASSERT_TRUE(decoded.ok() && alone.ok());
    sent += (*decoded)[0].values[1];
    plain += (*alone)[0].values[1];
    // What was sent plus what is kept is what was meant, every round.
    EXPECT_NEAR(sent + residual[0].values[1], 0.001 * round, 1e-5) << "round " << round;
  }
  EXPECT_EQ(plain, 0.0) << "without feedback 0.001 never gets through";
  EXPECT_NEAR(sent, 0.05, 1.0 / 127) << "within one quantization step of 50 × 0.001";
}

TEST(Codec, Int8RefusesWhatIsNotFinite) {
  Weights w = Model({1, NAN}, {3});
  auto decoded = Decode(Encode(w, Codec::kI8));
  ASSERT_FALSE(decoded.ok()) << "a NaN must not become a finite value on the way";
  EXPECT_NE(decoded.status().message().find("tensor fc.bias: its scale"), std::string::npos)
      << decoded.status().message();
}

TEST(Codec, RefusesInt8WithoutAScaleOrWithABadOne) {
  Weights w = Model({1, 2}, {3});
  tensors::TensorFile f = Encode(w, Codec::kI8);
  f.metadata.erase("scale:fc.bias");
  auto missing = Decode(f);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("tensor fc.bias: int8 without its scale"),
            std::string::npos);
  f.metadata["scale:fc.bias"] = "inf";
  EXPECT_NE(Decode(f).status().message().find("not a finite number"), std::string::npos);
  f.metadata["scale:fc.bias"] = "-1";
  EXPECT_FALSE(Decode(f).ok());
}

TEST(Aggregation, ChecksRejectWrongShapesNonFiniteValuesAndScaledDeltas) {
  Weights model = Model({0, 0}, {0, 0, 0});
  std::vector<Delta> deltas = {
      {Model({0.1f, 0.1f}, {0.1f, 0.1f, 0.1f}), 10},
      {Model({0.1f, 0.2f}, {0.1f, 0.0f, 0.1f}), 10},
      {Model({0.1f, 0.1f}, {0.1f, 0.1f}), 10},                         // a tensor's shape
      {Model({0.1f, NAN}, {0.1f, 0.1f, 0.1f}), 10},                    // not finite
      {Model({100.0f, 100.0f}, {100.0f, 100.0f, 100.0f}), 10},         // scaled 1000×
      {Model({0.1f, 0.1f}, {0.1f, 0.1f, 0.1f}), 0},                    // no samples
      {Model({0.12f, 0.1f}, {0.1f, 0.1f, 0.08f}), 10},
      {Model({0.1f, 0.1f}, {0.1f, 0.1f, 0.1f}), 1e12},                 // claims every sample
  };
  Verdicts v = CheckDeltas(model, deltas, CheckSpec{0, 10, 100});
  EXPECT_EQ(v.accepted, (std::vector<size_t>{0, 1, 6}));
  ASSERT_EQ(v.rejected.size(), 5u);
  EXPECT_EQ(v.rejected[0].first, 2u);
  EXPECT_NE(v.rejected[0].second.find("tensor fc.weight: wrong shape"), std::string::npos);
  EXPECT_NE(v.rejected[1].second.find("not finite"), std::string::npos);
  EXPECT_NE(v.rejected[2].second.find("× the median of the other devices'"), std::string::npos);
  EXPECT_NE(v.rejected[3].second.find("sample count"), std::string::npos);
  EXPECT_NE(v.rejected[4].second.find("more than its task's 100"), std::string::npos);
  // Two deltas, one scaled: the liar is caught against the other alone.
  std::vector<Delta> pair = {deltas[0], deltas[4]};
  EXPECT_EQ(CheckDeltas(model, pair, CheckSpec{0, 10}).accepted, (std::vector<size_t>{0}));
  // A device that made two of three deltas is judged by the other
  // device's alone (its own two would be the median).
  std::vector<Delta> twice = {deltas[0], deltas[4], deltas[4]};
  twice[0].device = "honest";
  twice[1].device = twice[2].device = "liar";
  Verdicts caught = CheckDeltas(model, twice, CheckSpec{0, 10});
  EXPECT_EQ(caught.accepted, (std::vector<size_t>{0}));
  ASSERT_EQ(caught.rejected.size(), 2u);
  twice[1].device = twice[2].device = "";
  EXPECT_EQ(CheckDeltas(model, twice, CheckSpec{0, 10}).accepted, (std::vector<size_t>{0, 1, 2}))
      << "as three devices, the two large ones are the median";
  // A missing tensor and an extra one are named as such.
  Weights extra = model;
  extra.push_back(Named{"fc.z", {1}, {0}});
  EXPECT_NE(SameShapes(model, extra).message().find("tensor fc.z: not in the model"), std::string::npos);
  EXPECT_NE(SameShapes(extra, model).message().find("tensor fc.z: missing"), std::string::npos);
  Verdicts bounded = CheckDeltas(model, deltas, CheckSpec{0.23, 0});
  EXPECT_EQ(bounded.accepted, (std::vector<size_t>{0, 6, 7}))
      << "norms 0.224 and 0.225 (and no bound on samples); 0.265 is out";
}

TEST(Aggregation, MeanIsWeightedBySamplesAndRobustRulesOutvoteLiars) {
  std::vector<Delta> deltas;
  // Eight honest deltas near +1, two liars flipping the sign ×5.
  for (int i = 0; i < 8; ++i) {
    float x = 1.0f + 0.01f * static_cast<float>(i);
    deltas.push_back({Model({x}, {x, x}), 1});
  }
  deltas.push_back({Model({-5}, {-5, -5}), 1});
  deltas.push_back({Model({-5}, {-5, -5}), 1});
  std::vector<size_t> all(deltas.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  double mean = Combine(deltas, all, Rule::kMean)[0].values[0];
  double median = Combine(deltas, all, Rule::kMedian)[0].values[0];
  double trimmed = Combine(deltas, all, Rule::kTrimmedMean, 0.2)[0].values[0];
  EXPECT_NEAR(mean, (8 + 0.28 - 10) / 10, 1e-6) << "two liars drag the plain mean below zero";
  EXPECT_NEAR(median, 1.03, 0.011);
  EXPECT_NEAR(trimmed, 1.035, 0.011);
  // Robust rules vote by device: a liar with six of ten deltas, merged,
  // is one voice against four honest devices.
  for (size_t i = 0; i < deltas.size(); ++i) deltas[i].device = i < 4 ? std::to_string(i) : "liar";
  deltas[4].weights = deltas[5].weights = deltas[6].weights = deltas[7].weights = Model({-5}, {-5, -5});
  EXPECT_NEAR(Combine(deltas, all, Rule::kMedian)[0].values[0], 1.01, 1e-5);
  EXPECT_NEAR(Combine(deltas, all, Rule::kTrimmedMean, 0.2)[0].values[0], 1.01, 1e-5);
  EXPECT_NEAR(Combine(deltas, all, Rule::kMean)[0].values[0], (4 + 0.06 - 30) / 10, 1e-6)
      << "the mean weighs by samples, whoever made them";
  // Weights: a delta with 3× the samples counts 3×.
  std::vector<Delta> two = {{Model({1}, {1, 1}), 3}, {Model({5}, {5, 5}), 1}};
  EXPECT_FLOAT_EQ(Combine(two, {0, 1}, Rule::kMean)[0].values[0], 2.0f);
}

TEST(Aggregation, OuterOptimizersStepAsDefined) {
  Weights delta = Model({1}, {2, -2});
  // FedAvg with lr 1: the model moves by the delta.
  Weights model = Model({0}, {0, 0}), state;
  OuterStep(OuterSpec{Outer::kFedAvg, 1.0}, delta, &model, &state);
  EXPECT_EQ(model[1].values, (std::vector<float>{2, -2}));
  EXPECT_TRUE(state.empty());
  // Nesterov (DiLoCo): g = -Δ; v = μv + g; θ -= lr (g + μ v).
  model = Model({0}, {0, 0});
  state.clear();
  OuterSpec nesterov{Outer::kNesterov, 0.7, 0.9};
  OuterStep(nesterov, delta, &model, &state);
  // v = -1, θ = 0 - 0.7 × (-1 + 0.9 × -1) = 1.33
  EXPECT_FLOAT_EQ(model[0].values[0], 1.33f);
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].name, "m:fc.bias");
  EXPECT_FLOAT_EQ(state[0].values[0], -1.0f);
  OuterStep(nesterov, delta, &model, &state);
  // v = 0.9 × -1 - 1 = -1.9; θ = 1.33 - 0.7 × (-1 - 1.71) = 3.227
  EXPECT_FLOAT_EQ(state[0].values[0], -1.9f);
  EXPECT_NEAR(model[0].values[0], 3.227f, 1e-5);
  // Adam: the first step moves each parameter by about lr against g's sign.
  model = Model({0}, {0, 0});
  state.clear();
  OuterStep(OuterSpec{Outer::kAdam, 0.1, 0, 0.9, 0.99, 1e-8}, delta, &model, &state);
  EXPECT_EQ(state.size(), 4u) << "m and v";
  EXPECT_GT(model[1].values[0], 0.0f);
  EXPECT_LT(model[1].values[1], 0.0f);
  EXPECT_NEAR(model[0].values[0], 0.1 * 0.1 / std::sqrt(0.01), 1e-4);
}

}  // namespace
}  // namespace claw

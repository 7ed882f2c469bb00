#include "apps/montecarlo.h"

#include <gtest/gtest.h>

#include "apps/registry.h"
#include "core/job_spec.h"

namespace claw {
namespace {

nlohmann::json RunJob(const std::string& spec_json) {
  AppRegistry apps = BuiltinApps();
  auto planned = ParseAndPlanJob(spec_json, apps);
  EXPECT_TRUE(planned.ok()) << planned.status().ToString();
  const App* app = apps.Find(planned->spec.app);
  std::vector<std::string> outputs;
  for (const auto& t : planned->tasks) {
    auto out = app->Run(t.params, {});
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    outputs.push_back(*out);
  }
  std::vector<std::string_view> views(outputs.begin(), outputs.end());
  auto merged = app->Merge(planned->spec, views);
  EXPECT_TRUE(merged.ok()) << merged.status().ToString();
  return *merged;
}

TEST(MonteCarlo, EuropeanCallAndPutMatchBlackScholesWithinThreeStandardErrors) {
  for (std::string model : {"european_call", "european_put"}) {
    auto r = RunJob(R"({"app":"montecarlo","tasks":8,"seed":3,"params":{"model":")" + model +
                    R"(","paths":400000,"S0":100,"K":105,"r":0.03,"sigma":0.25,"T":0.5}})");
    double bs = BlackScholes(model == "european_call", 100, 105, 0.03, 0.25, 0.5);
    EXPECT_NEAR(r["reference"].get<double>(), bs, 1e-12);
    EXPECT_LT(std::abs(r["estimate"].get<double>() - bs), 3 * r["std_error"].get<double>())
        << model << " estimate " << r["estimate"] << " vs " << bs;
    EXPECT_EQ(r["paths"].get<uint64_t>(), 400000u);
  }
}

TEST(MonteCarlo, BlackScholesKnownValue) {
  // Hull's textbook example: S=42, K=40, r=10%, sigma=20%, T=0.5.
  EXPECT_NEAR(BlackScholes(true, 42, 40, 0.1, 0.2, 0.5), 4.76, 0.005);
  EXPECT_NEAR(BlackScholes(false, 42, 40, 0.1, 0.2, 0.5), 0.81, 0.005);
}

TEST(MonteCarlo, PiAndAsianAreSane) {
  auto pi = RunJob(R"({"app":"montecarlo","tasks":4,"params":{"model":"pi","paths":200000}})");
  EXPECT_LT(std::abs(pi["estimate"].get<double>() - M_PI), 4 * pi["std_error"].get<double>());
  auto asian = RunJob(
      R"({"app":"montecarlo","tasks":4,"params":{"model":"asian_call","paths":40000,"steps":12}})");
  double european = BlackScholes(true, 100, 100, 0.05, 0.2, 1);
  // Averaging lowers volatility: the Asian call is cheaper than the European.
  EXPECT_GT(asian["estimate"].get<double>(), 0.0);
  EXPECT_LT(asian["estimate"].get<double>(), european);
}

TEST(MonteCarlo, DeterministicPerSeedAndTask) {
  std::string spec = R"({"app":"montecarlo","tasks":5,"seed":9,"params":{"model":"european_call","paths":5000}})";
  EXPECT_EQ(RunJob(spec).dump(), RunJob(spec).dump());
  std::string other = R"({"app":"montecarlo","tasks":5,"seed":10,"params":{"model":"european_call","paths":5000}})";
  EXPECT_NE(RunJob(spec)["estimate"], RunJob(other)["estimate"]);
}

TEST(MonteCarlo, MergeIsTheParallelVarianceFormula) {
  MomentSummary all, a, b;
  for (int i = 0; i < 1000; ++i) {
    double x = std::sin(i) * 10 + i * 0.01;
    all.Add(x);
    (i < 300 ? a : b).Add(x);
  }
  a.Merge(b);
  EXPECT_EQ(a.count, all.count);
  EXPECT_NEAR(a.mean, all.mean, 1e-12);
  EXPECT_NEAR(a.m2, all.m2, 1e-8);
  auto round = MomentSummary::Decode(a.Encode());
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(round->mean, a.mean);
}

TEST(MonteCarlo, RejectsBadParametersNamingTheField) {
  AppRegistry apps = BuiltinApps();
  auto check = [&](const std::string& spec, const std::string& needle) {
    auto r = ParseAndPlanJob(spec, apps);
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  check(R"({"app":"montecarlo","params":{"model":"pi"}})", "params.paths");
  check(R"({"app":"montecarlo","params":{"model":"exotic","paths":10}})", "params.model");
  check(R"({"app":"montecarlo","params":{"model":"pi","paths":"many"}})", "params.paths");
  check(R"({"app":"montecarlo","params":{"model":"pi","paths":-5}})", "params.paths");
  check(R"({"app":"montecarlo","params":{"model":"pi","paths":1e15}})", "params.paths");
  check(R"({"app":"montecarlo","tasks":1,"params":{"model":"pi","paths":1e12}})",
        "per task");
  check(R"({"app":"montecarlo","params":{"model":"pi","paths":10,"sigma":-1}})", "params.sigma");
  check(R"({"app":"montecarlo","params":{"model":"pi","paths":10,"colour":1}})",
        "params.colour: unknown field");
  check(R"({"app":"montecarlo","tasks":20,"params":{"model":"pi","paths":10}})", "spec.tasks");
}

TEST(MonteCarlo, EquivalentToleratesLastBitsOnly) {
  MonteCarloApp app;
  MomentSummary a;
  a.Add(1.0);
  a.Add(2.0);
  MomentSummary b = a;
  b.mean = std::nextafter(b.mean, 10.0);
  MomentSummary c = a;
  c.mean += 1e-3;
  EXPECT_TRUE(app.Equivalent("", a.Encode(), b.Encode()));
  EXPECT_FALSE(app.Equivalent("", a.Encode(), c.Encode()));
  EXPECT_FALSE(app.Equivalent("", a.Encode(), "junk"));
}

}  // namespace
}  // namespace claw

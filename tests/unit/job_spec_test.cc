#include "core/job_spec.h"

#include <gtest/gtest.h>

#include "apps/registry.h"

namespace claw {
namespace {

void ExpectError(const std::string& spec, StatusCode code, const std::string& needle) {
  AppRegistry apps = BuiltinApps();
  auto r = ParseAndPlanJob(spec, apps);
  ASSERT_FALSE(r.ok()) << spec;
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(JobSpec, MalformedJson) { ExpectError("{\"app\": ", StatusCode::kInvalidArgument, "malformed JSON"); }
TEST(JobSpec, NotAnObject) { ExpectError("[1,2]", StatusCode::kInvalidArgument, "JSON object"); }
TEST(JobSpec, MissingApp) { ExpectError("{}", StatusCode::kInvalidArgument, "spec.app"); }
TEST(JobSpec, UnknownApp) {
  ExpectError(R"({"app":"bitcoin"})", StatusCode::kInvalidArgument, "unknown app 'bitcoin'");
}
TEST(JobSpec, WrongTypes) {
  ExpectError(R"({"app":"noop","tasks":"ten"})", StatusCode::kInvalidArgument, "spec.tasks");
  ExpectError(R"({"app":"noop","params":[1]})", StatusCode::kInvalidArgument, "spec.params");
  ExpectError(R"({"app":7})", StatusCode::kInvalidArgument, "spec.app");
  ExpectError(R"({"app":"noop","seed":-1})", StatusCode::kInvalidArgument, "spec.seed");
}
TEST(JobSpec, AbsurdSizes) {
  ExpectError(R"({"app":"noop","tasks":100000000})", StatusCode::kInvalidArgument, "spec.tasks");
  // Absent, the app decides how many; 0 given is a mistake, like -1.
  ExpectError(R"({"app":"noop","tasks":0})", StatusCode::kInvalidArgument, "spec.tasks");
  ExpectError(R"({"app":"noop","tasks":-1})", StatusCode::kInvalidArgument, "spec.tasks");
  ExpectError(R"({"app":"noop","priority":1000})", StatusCode::kInvalidArgument, "spec.priority");
  ExpectError(R"({"app":"noop","task_timeout_s":0})", StatusCode::kInvalidArgument,
              "spec.task_timeout_s");
  ExpectError("{\"app\":\"noop\",\"name\":\"" + std::string(2 << 20, 'x') + "\"}",
              StatusCode::kResourceExhausted, "limit");
}
TEST(JobSpec, UnknownField) {
  ExpectError(R"({"app":"noop","taks":3})", StatusCode::kInvalidArgument, "spec.taks: unknown");
}
TEST(JobSpec, RoundTripsThroughStoredForm) {
  AppRegistry apps = BuiltinApps();
  auto r = ParseAndPlanJob(
      R"({"app":"montecarlo","name":"n","tasks":3,"seed":5,"priority":2,"params":{"model":"pi","paths":30}})",
      apps);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tasks.size(), 3u);
  auto again = ParseJobSpec(r->spec.ToJson().dump(), apps);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->ToJson(), r->spec.ToJson());
}

}  // namespace
}  // namespace claw

namespace claw {
namespace {

// Found by fuzz_job_spec: a number too large for a double made the JSON
// library throw an exception the parser did not catch.
TEST(JobSpecFuzzFinds, ANumberTooLargeIsAClearError) {
  AppRegistry apps = BuiltinApps();
  auto r = ParseAndPlanJob(R"({"app":"noop","tasks":1e999999})", apps);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("spec.tasks: the number 1e999999 is out of range"),
            std::string::npos)
      << r.status().message();
  // Deeper down too, and in arrays.
  r = ParseAndPlanJob(R"({"app":"montecarlo","params":{"model":"pi","paths":-1e999999}})", apps);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("spec.params.paths: the number -1e999999"),
            std::string::npos)
      << r.status().message();
  r = ParseAndPlanJob(R"({"app":"exec","params":{"command":["a", 2, 1e400]}})", apps);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("spec.params.command[2]: the number 1e400"),
            std::string::npos)
      << r.status().message();
  // Other malformed JSON keeps the parser's words, with where it was.
  r = ParseAndPlanJob(R"({"app":"noop","params":{"x":tru}})", apps);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("malformed JSON (in spec.params.x)"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace claw

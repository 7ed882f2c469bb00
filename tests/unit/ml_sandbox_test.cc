// The sandboxed ML runner's staging (apps/ml_sandbox.h): what a task's
// params name is placed inside its scratch directory and nowhere else.
#include "apps/ml_sandbox.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/blobs.h"
#include "tests/requirements.h"

namespace claw {
namespace {

namespace fs = std::filesystem;

TEST(MlSandbox, AnInputNamedOutsideTheScratchDirectoryIsRefused) {
  CLAW_REQUIRE(testing::NeedMlBuild());
  const fs::path dir = fs::temp_directory_path() / ("claw-mlsb-" + std::to_string(getpid()));
  fs::create_directories(dir / "blobs");
  fs::create_directories(dir / "scratch");
  BlobDir blobs((dir / "blobs").string());
  ASSERT_TRUE(blobs.Init().ok());
  auto hash = blobs.Put("planted");
  ASSERT_TRUE(hash.ok()) << hash.status().ToString();
  RunContext ctx;
  ctx.blobs = &blobs;
  ctx.scratch_dir = (dir / "scratch").string();
  for (const std::string& path : {std::string("data/../../escaped"), std::string("/tmp/claw-escaped"),
                                  std::string("")}) {
    MlSandboxRun run;
    run.inputs[path] = *hash;
    run.request = {{"op", "inspect"}};
    auto r = RunMlSandboxed(run, ctx);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_NE(r.status().message().find("not a path inside the scratch directory"), std::string::npos)
        << r.status().message();
  }
  EXPECT_FALSE(fs::exists(dir / "escaped"));
  EXPECT_FALSE(fs::exists("/tmp/claw-escaped"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace claw

// Replays the fuzzers' seeds and every input that once broke them through
// the same target code (fuzz/targets.h), in every build.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fuzz/targets.h"

namespace claw {
namespace {

void ReplayAll(const std::string& target, void (*body)(std::string_view)) {
  size_t replayed = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    std::filesystem::path dir = std::filesystem::path(CLAW_SOURCE_DIR) / "fuzz" / kind / target;
    if (!std::filesystem::exists(dir)) continue;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::ifstream f(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      SCOPED_TRACE(e.path().string());
      body(ss.str());  // aborts on a broken invariant
      replayed++;
    }
  }
  EXPECT_GT(replayed, 0u) << "no inputs for " << target;
}

TEST(FuzzRegressions, JobSpec) { ReplayAll("job_spec", FuzzJobSpec); }
TEST(FuzzRegressions, AgentMessage) { ReplayAll("agent_message", FuzzAgentMessage); }
TEST(FuzzRegressions, ClientRequests) { ReplayAll("client_requests", FuzzClientRequests); }
TEST(FuzzRegressions, Safetensors) { ReplayAll("safetensors", FuzzSafetensors); }
TEST(FuzzRegressions, Npy) { ReplayAll("npy", FuzzNpy); }
TEST(FuzzRegressions, Npz) { ReplayAll("npz", FuzzNpz); }
TEST(FuzzRegressions, Tokens) { ReplayAll("tokens", FuzzTokens); }
TEST(FuzzRegressions, SignedNote) { ReplayAll("signed_note", FuzzSignedNote); }

}  // namespace
}  // namespace claw

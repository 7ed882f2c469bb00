#include <gtest/gtest.h>

#include "coordinator/http_server.h"

namespace claw {
namespace {

// A stream cuts a client that falls behind (bytes waiting past the limit),
// but one state larger than the limit still goes to a client that had read
// everything before it.
TEST(HttpStream, CutsABacklogPastItsLimitButNotOneLargeEvent) {
  HttpStream s(10);
  EXPECT_TRUE(s.Push(std::string(100, 'x'))) << "nothing waiting: sent whole";
  EXPECT_EQ(s.buffered(), 100u);
  EXPECT_FALSE(s.Push("y")) << "100 bytes still waiting: the client does not read";
  EXPECT_TRUE(s.closed());
  EXPECT_TRUE(s.overflowed());
  EXPECT_EQ(s.buffered(), 0u) << "what it held is freed";
  EXPECT_FALSE(s.Push("z"));
}

TEST(HttpStream, ClosedStreamsTakeNothing) {
  HttpStream s(1 << 20);
  EXPECT_TRUE(s.Push("a"));
  s.Close();
  EXPECT_TRUE(s.closed());
  EXPECT_FALSE(s.overflowed());
  EXPECT_FALSE(s.Push("b"));
}

}  // namespace
}  // namespace claw

#include <gtest/gtest.h>

#include "agent/agent.h"

namespace claw {
namespace {

TEST(Prefetch, CoversThePrefetchWindowAtTheAverageTaskTime) {
  // 2 slots, 20 ms of work per slot at 1 ms a task: 40 queued beyond the 2 running.
  EXPECT_EQ(PrefetchTarget(2, 0.02, 0.001, 256), 42u);
  // Long tasks: at least one queued task.
  EXPECT_EQ(PrefetchTarget(2, 0.02, 5.0, 256), 3u);
  // No measurement yet: one queued per slot.
  EXPECT_EQ(PrefetchTarget(4, 0.02, 0.0, 256), 8u);
}

TEST(Prefetch, InstantTasksReachTheCapInsteadOfOverflowing) {
  double avg = 0;
  for (int i = 0; i < 10'000; ++i) avg = UpdateTaskTimeAverage(avg, 0.0);
  EXPECT_GT(avg, 0.0);
  EXPECT_EQ(PrefetchTarget(1, 0.02, avg, 256), 257u);
  // Even a zero or denormal average must not wrap around.
  EXPECT_EQ(PrefetchTarget(1, 0.02, 1e-310, 256), 257u);
}

TEST(Prefetch, AverageFollowsRecentTaskTimes) {
  double avg = UpdateTaskTimeAverage(0, 0.1);
  EXPECT_DOUBLE_EQ(avg, 0.1);
  for (int i = 0; i < 100; ++i) avg = UpdateTaskTimeAverage(avg, 0.01);
  EXPECT_NEAR(avg, 0.01, 1e-5);
}

}  // namespace
}  // namespace claw

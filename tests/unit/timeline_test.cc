#include "coordinator/timeline.h"

#include <gtest/gtest.h>

namespace claw {
namespace {

TEST(TaskTimeline, SpansFollowLeasesFromGrantToVerdict) {
  TaskTimeline t;
  t.Granted(1, "j1", 0, "a", Time{100});
  t.Granted(2, "j1", 0, "b", Time{110});  // a replica: attempt 2
  t.Granted(3, "j1", 1, "a", Time{120});
  t.Reported(1, "a", "done");
  t.Ended(1, Time{200});
  t.Reported(2, "b", "done");
  t.Ended(2, Time{210});
  t.Judged("j1", 0, "a", true);
  t.Judged("j1", 0, "b", false);
  t.Reported(3, "b", "failed", "forged by another agent");
  t.Reported(3, "a", "failed", "exit status 3");
  t.Ended(3, Time{230});
  t.Granted(4, "j1", 1, "b", Time{240});  // the retry, still running
  auto spans = t.Of("j1");
  ASSERT_EQ(spans.size(), 4u);
  EXPECT_EQ(spans[0].outcome, "valid");
  EXPECT_EQ(spans[0].end.us, 200);
  EXPECT_EQ(spans[1].outcome, "invalid");
  EXPECT_EQ(spans[1].attempt, 2u);
  EXPECT_EQ(spans[2].outcome, "failed");
  EXPECT_EQ(spans[2].detail, "exit status 3");
  EXPECT_EQ(spans[3].outcome, "running");
  EXPECT_EQ(spans[3].attempt, 2u);
  EXPECT_EQ(spans[3].end.us, 0);
  t.Ended(4, Time{300});
  EXPECT_EQ(t.Of("j1")[3].outcome, "ended") << "expired or no longer needed";
}

TEST(TaskTimeline, IsBoundedInSpansPerJobAndInJobs) {
  TaskTimeline t(/*max_jobs=*/2, /*max_spans=*/3);
  for (LeaseId l = 1; l <= 5; ++l) t.Granted(l, "j1", static_cast<uint32_t>(l), "a", Time{0});
  size_t dropped = 0;
  EXPECT_EQ(t.Of("j1", &dropped).size(), 3u);
  EXPECT_EQ(dropped, 2u);
  t.Reported(5, "a", "done");  // a lease past the bound: ignored
  t.Granted(10, "j2", 0, "a", Time{0});
  t.Granted(6, "j1", 9, "a", Time{0});   // j1 is busy again: j2 is now the least recent
  t.Granted(11, "j3", 0, "a", Time{0});  // a third job: the least recently granted goes
  EXPECT_TRUE(t.Of("j2").empty());
  t.Ended(10, Time{5});  // j2's open lease was forgotten with it: nothing to end
  EXPECT_EQ(t.Of("j1").size(), 3u);
  EXPECT_EQ(t.Of("j3").size(), 1u);
  EXPECT_EQ(t.Of("j3")[0].end.us, 0);
}

}  // namespace
}  // namespace claw

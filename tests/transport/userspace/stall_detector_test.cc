#include "transport/userspace/stall_detector.h"

#include <gtest/gtest.h>

#include "tests/fakes/manual_clock.h"

namespace stagehand::transport::userspace {
namespace {

using stagehand::testing::ManualClock;
using std::chrono::seconds;

class StallDetectorTest : public ::testing::Test {
 protected:
  ManualClock clock_;
  StallDetector detector_{seconds(30), clock_};
};

TEST_F(StallDetectorTest, RequestsWaitingWithNoCompletionForTheTimeoutAreAStall) {
  EXPECT_FALSE(detector_.Observe("s", {.in_flight = 2, .completed = 100}));
  clock_.Advance(seconds(29));
  EXPECT_FALSE(detector_.Observe("s", {.in_flight = 2, .completed = 100}));
  clock_.Advance(seconds(1));
  auto waited = detector_.Observe("s", {.in_flight = 3, .completed = 100});
  ASSERT_TRUE(waited.has_value());
  EXPECT_EQ(*waited, seconds(30));
  // One completion and the clock starts again.
  EXPECT_FALSE(detector_.Observe("s", {.in_flight = 3, .completed = 101}));
  clock_.Advance(seconds(10));
  EXPECT_FALSE(detector_.Observe("s", {.in_flight = 3, .completed = 101}));
}

TEST_F(StallDetectorTest, AnIdleOrSlowDataPathIsNoStall) {
  EXPECT_FALSE(detector_.Observe("s", {.in_flight = 0, .completed = 5}));
  clock_.Advance(seconds(600));
  EXPECT_FALSE(detector_.Observe("s", {.in_flight = 0, .completed = 5}));
  // Busy now, but the last look (10 min ago) saw nothing waiting: measured from now on.
  EXPECT_FALSE(detector_.Observe("s", {.in_flight = 1, .completed = 5}));
  for (int i = 0; i < 10; ++i) {  // Slow, but moving.
    clock_.Advance(seconds(20));
    EXPECT_FALSE(
        detector_.Observe("s", {.in_flight = 1, .completed = 6 + static_cast<uint64_t>(i)}));
  }
}

TEST_F(StallDetectorTest, DataPathsAreApartAndForgotten) {
  EXPECT_FALSE(detector_.Observe("a", {.in_flight = 1, .completed = 1}));
  EXPECT_FALSE(detector_.Observe("b", {.in_flight = 1, .completed = 1}));
  clock_.Advance(seconds(31));
  EXPECT_TRUE(detector_.Observe("a", {.in_flight = 1, .completed = 1}));
  detector_.Forget("b");
  EXPECT_FALSE(detector_.Observe("b", {.in_flight = 1, .completed = 1}));  // A first look again.
}

}  // namespace
}  // namespace stagehand::transport::userspace

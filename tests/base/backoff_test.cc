#include "base/backoff.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/fakes/manual_clock.h"

namespace stagehand {
namespace {

using std::chrono::milliseconds;
using testing::ManualClock;

TEST(BackoffTest, BaseDelayDoublesFromInitialUpToMax) {
  const BackoffPolicy policy{milliseconds(500), milliseconds(120'000), 2.0, 0.0};

  EXPECT_EQ(RetrySchedule::BaseDelay(policy, 1), milliseconds(500));
  EXPECT_EQ(RetrySchedule::BaseDelay(policy, 2), milliseconds(1000));
  EXPECT_EQ(RetrySchedule::BaseDelay(policy, 3), milliseconds(2000));
  EXPECT_EQ(RetrySchedule::BaseDelay(policy, 8), milliseconds(64'000));
  EXPECT_EQ(RetrySchedule::BaseDelay(policy, 9), milliseconds(120'000));
  EXPECT_EQ(RetrySchedule::BaseDelay(policy, 1000), milliseconds(120'000));
}

TEST(BackoffTest, FreshScheduleIsDueImmediately) {
  ManualClock clock;
  RetrySchedule schedule(clock, BackoffPolicy{});

  EXPECT_TRUE(schedule.Due());
  EXPECT_EQ(schedule.failures(), 0);
}

TEST(BackoffTest, FailureDefersTheNextAttemptByTheDelayOnTheClock) {
  ManualClock clock;
  RetrySchedule schedule(clock, BackoffPolicy{milliseconds(500), milliseconds(120'000), 2.0, 0.0});

  const auto first = schedule.Failed();
  const auto second = schedule.Failed();

  EXPECT_EQ(first, milliseconds(500));
  EXPECT_EQ(second, milliseconds(1000));
  EXPECT_EQ(schedule.failures(), 2);
  EXPECT_FALSE(schedule.Due());
  clock.Advance(milliseconds(999));
  EXPECT_FALSE(schedule.Due());
  clock.Advance(milliseconds(1));
  EXPECT_TRUE(schedule.Due());
}

TEST(BackoffTest, SuccessResetsToTheInitialDelay) {
  ManualClock clock;
  RetrySchedule schedule(clock, BackoffPolicy{milliseconds(500), milliseconds(120'000), 2.0, 0.0});
  for (int i = 0; i < 5; ++i) {
    (void)schedule.Failed();
  }

  schedule.Succeeded();

  EXPECT_TRUE(schedule.Due());
  EXPECT_EQ(schedule.failures(), 0);
  EXPECT_EQ(schedule.Failed(), milliseconds(500));
}

TEST(BackoffTest, JitterStaysWithinItsFractionAndNeverExceedsMax) {
  ManualClock clock;
  const BackoffPolicy policy{milliseconds(1000), milliseconds(4000), 2.0, 0.2};
  RetrySchedule schedule(clock, policy, /*seed=*/42);
  bool varied = false;
  milliseconds last{0};

  for (int i = 1; i <= 50; ++i) {
    const auto base = RetrySchedule::BaseDelay(policy, std::min(i, 3));
    const auto delay = schedule.Failed();
    EXPECT_GE(delay.count(), base.count() * 8 / 10) << "failure " << i;
    EXPECT_LE(delay.count(), std::min<int64_t>(base.count() * 12 / 10, 4000)) << "failure " << i;
    varied = varied || (i > 3 && delay != last);
    last = delay;
  }

  EXPECT_TRUE(varied) << "jitter must spread retries";
}

TEST(SplitMix64Test, GivesTheReferenceSequence) {
  // The reference implementation's first outputs from seed 0.
  SplitMix64 random(0);
  EXPECT_EQ(random(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(random(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(random(), 0x06c45d188009454fULL);
}

TEST(NextBaseDelayTest, StartsAtInitialAndGrowsUpToMax) {
  const BackoffPolicy policy{.initial = milliseconds(250), .max = milliseconds(5000)};
  EXPECT_EQ(NextBaseDelay(policy, milliseconds(0)), milliseconds(250));
  EXPECT_EQ(NextBaseDelay(policy, milliseconds(250)), milliseconds(500));
  EXPECT_EQ(NextBaseDelay(policy, milliseconds(4000)), milliseconds(5000));
  EXPECT_EQ(NextBaseDelay(policy, milliseconds(5000)), milliseconds(5000));
}

}  // namespace
}  // namespace stagehand

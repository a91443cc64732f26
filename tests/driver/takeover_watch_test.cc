#include "driver/takeover_watch.h"

#include <chrono>
#include <vector>

#include <gtest/gtest.h>

#include "tests/fakes/manual_clock.h"

namespace stagehand::driver {
namespace {

using std::chrono::seconds;

TEST(TakeoverWatchTest, AHolderKeyUnchangedForTheTakeoverTimeIsTakenOver) {
  testing::ManualClock clock;
  TakeoverWatch watch(clock);
  EXPECT_EQ(watch.KeyToTakeOver("v", seconds(30)), 0u) << "nothing seen yet";

  watch.Refused("v", 0xa1);
  clock.Advance(seconds(29));
  watch.Refused("v", 0xa1);
  EXPECT_EQ(watch.KeyToTakeOver("v", seconds(30)), 0u) << "not before the takeover time";
  clock.Advance(seconds(1));

  EXPECT_EQ(watch.KeyToTakeOver("v", seconds(30)), 0xa1u);
  EXPECT_EQ(watch.KeyToTakeOver("w", seconds(30)), 0u) << "per volume";
}

TEST(TakeoverWatchTest, ARenewedKeyRestartsTheWaitAndForgetEndsIt) {
  testing::ManualClock clock;
  TakeoverWatch watch(clock);
  watch.Refused("v", 0xa1);
  clock.Advance(seconds(20));
  watch.Refused("v", 0xa2);  // The holder renewed: alive.
  clock.Advance(seconds(20));

  EXPECT_EQ(watch.KeyToTakeOver("v", seconds(30)), 0u);
  clock.Advance(seconds(10));
  EXPECT_EQ(watch.KeyToTakeOver("v", seconds(30)), 0xa2u);
  watch.Forget("v");
  EXPECT_EQ(watch.KeyToTakeOver("v", seconds(30)), 0u);
}

// A holder with several paths (dm-multipath) whose reserving path is down keeps renewing the
// others: its key stands still, but its node's keys do not, so it is alive.
TEST(TakeoverWatchTest, AnotherPathOfTheHolderRenewingRestartsTheWait) {
  testing::ManualClock clock;
  TakeoverWatch watch(clock);
  watch.Refused("v", 0xa1, 0x111);
  clock.Advance(seconds(20));
  watch.Refused("v", 0xa1, 0x222);
  clock.Advance(seconds(20));
  EXPECT_EQ(watch.KeyToTakeOver("v", seconds(30)), 0u);
  clock.Advance(seconds(10));
  watch.Refused("v", 0xa1, 0x222);
  uint64_t node_keys = 0;
  EXPECT_EQ(watch.KeyToTakeOver("v", seconds(30), &node_keys), 0xa1u)
      << "nothing of its node moved for 30 s";
  EXPECT_EQ(node_keys, 0x222u) << "the claim checks them again at the target";
}

TEST(TakeoverWatchTest, CountsRefusalsAndTakeoversPerVolumeBeyondForget) {
  testing::ManualClock clock;
  TakeoverWatch watch(clock);
  EXPECT_TRUE(watch.Tallies().empty());
  watch.Refused("v", 0xa1);
  watch.Refused("v", 0xa1);
  watch.Refused("w", 0xb1);
  watch.Forget("v");
  watch.TookOver("v");

  const std::vector<ReservationTally> tallies = watch.Tallies();
  ASSERT_EQ(tallies.size(), 2u);
  EXPECT_EQ(tallies[0].volume_id, "v");
  EXPECT_EQ(tallies[0].refusals, 2u);
  EXPECT_EQ(tallies[0].takeovers, 1u);
  EXPECT_EQ(tallies[1].volume_id, "w");
  EXPECT_EQ(tallies[1].refusals, 1u);
  EXPECT_EQ(tallies[1].takeovers, 0u);
}

}  // namespace
}  // namespace stagehand::driver

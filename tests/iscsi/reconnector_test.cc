#include "iscsi/reconnector.h"

#include <chrono>

#include <gtest/gtest.h>

namespace stagehand::iscsi {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(NextLoginBackoffMsTest, DoublesUpToFiveSeconds) {
  EXPECT_EQ(NextLoginBackoffMs(250), 500);
  EXPECT_EQ(NextLoginBackoffMs(2000), 4000);
  EXPECT_EQ(NextLoginBackoffMs(4000), 5000);
  EXPECT_EQ(NextLoginBackoffMs(5000), 5000);
}

TEST(FlapBackoffMsTest, NoWaitWhenTheLastReconnectIsOld) {
  EXPECT_EQ(FlapBackoffMs(0, seconds(2)), 0);
  EXPECT_EQ(FlapBackoffMs(4000, seconds(60)), 0);
}

TEST(FlapBackoffMsTest, WaitsLongerWhileTheConnectionKeepsFlapping) {
  EXPECT_EQ(FlapBackoffMs(0, milliseconds(100)), 250);
  EXPECT_EQ(FlapBackoffMs(250, milliseconds(1999)), 500);
  EXPECT_EQ(FlapBackoffMs(4000, milliseconds(10)), 5000);
  EXPECT_EQ(FlapBackoffMs(5000, milliseconds(10)), 5000);
}

}  // namespace
}  // namespace stagehand::iscsi

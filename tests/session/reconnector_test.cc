#include "session/reconnector.h"

#include <chrono>

#include <gtest/gtest.h>

#include "session/server_status.h"

namespace stagehand::session {
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

TEST(StatusBoardTest, IoFailingLastsUntilTheReconnectEnds) {
  StatusBoard board;
  board.Publish(ServerState::kReconnecting, "connection lost");
  EXPECT_FALSE(board.status.io_failing);
  board.status.io_failing = true;  // The replacement timeout passed.
  board.Publish(ServerState::kReconnecting, "still logging in");
  EXPECT_TRUE(board.status.io_failing) << "still reconnecting: I/O still fails";
  board.Publish(ServerState::kUp, "serving");
  EXPECT_FALSE(board.status.io_failing);
}

}  // namespace
}  // namespace stagehand::session

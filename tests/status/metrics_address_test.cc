#include <gtest/gtest.h>

#include "status/metrics.h"

namespace stagehand::status {
namespace {

TEST(ListeningAddressTest, BracketsABareIpv6LiteralAndLeavesTheRestAlone) {
  EXPECT_EQ(ListeningAddress("fd00::1:29780"), "[fd00::1]:29780");
  EXPECT_EQ(ListeningAddress("::1:0"), "[::1]:0");
  EXPECT_EQ(ListeningAddress("[fd00::1]:29780"), "[fd00::1]:29780");
  EXPECT_EQ(ListeningAddress("10.0.0.7:29780"), "10.0.0.7:29780");
  EXPECT_EQ(ListeningAddress("0.0.0.0:29780"), "0.0.0.0:29780");
  EXPECT_EQ(ListeningAddress("29780"), "29780");
  EXPECT_EQ(ListeningAddress(""), "");
}

}  // namespace
}  // namespace stagehand::status

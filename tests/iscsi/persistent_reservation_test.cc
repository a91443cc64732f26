#include "iscsi/persistent_reservation.h"

#include <gtest/gtest.h>

namespace stagehand::iscsi {
namespace {

TEST(NodeKeyTest, AKeyTellsItsNodeWhateverItsRotation) {
  const uint64_t first = NodeKey("node-a", 0);
  const uint64_t renewed = NodeKey("node-a", 41);

  EXPECT_NE(first, renewed);
  EXPECT_EQ(first >> 32, renewed >> 32);
  EXPECT_TRUE(IsNodeKey(renewed, "node-a"));
  EXPECT_FALSE(IsNodeKey(renewed, "node-b"));
  EXPECT_FALSE(IsNodeKey(NodeKey("node-b", 41), "node-a"));
}

TEST(NodeKeyTest, IsStableAcrossBuildsAndNeverZero) {
  // The first four bytes of SHA-256("node-a"): a node restarted with a new build must find its
  // own key on the target.
  EXPECT_EQ(NodeKeyPrefix("node-a"), 0x66570ff0u);
  EXPECT_NE(NodeKey("", 0), 0u);
  EXPECT_EQ(FormatKey(NodeKey("node-a", 7)), "0x66570ff000000007");
}

TEST(ReservationTypeNameTest, NamesTheSpcTypes) {
  EXPECT_EQ(ReservationTypeName(kWriteExclusiveRegistrantsOnly),
            "Write Exclusive - Registrants Only");
  EXPECT_EQ(ReservationTypeName(2), "type 2");
}

}  // namespace
}  // namespace stagehand::iscsi

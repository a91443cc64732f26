// Claiming a LUN for one node's writes (iscsi/reservation_claim.h) against tgtd, with the
// initiators of two nodes: one holder at a time, a new login of the holder takes its own
// reservation back from the nexus it lost, a node whose registration another node preempted is
// fenced and never registers again on its own, and a release leaves nothing behind.

#include "iscsi/reservation_claim.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <absl/strings/match.h>
#include <gtest/gtest.h>

#include "iscsi/libiscsi_connection.h"
#include "iscsi/persistent_reservation.h"
#include "tests/integration/node_test_base.h"

namespace stagehand::testing {
namespace {

using iscsi::ReserveAction;

constexpr char kNodeA[] = "iqn.2026-12.dev.stagehand:node-a";
constexpr char kNodeB[] = "iqn.2026-12.dev.stagehand:node-b";

class ReservationClaimTest : public NodeIntegrationTest {
 protected:
  void SetUp() override {
    NodeIntegrationTest::SetUp();
    if (IsSkipped()) {
      return;
    }
    AddLun();
  }

  // What the target says of the LUN, through a login of its own.
  iscsi::Reservations Now() const {
    auto conn = LoginAs("iqn.2026-12.dev.stagehand:observer");
    if (conn == nullptr) {
      return {};
    }
    auto r = conn->ReadReservations();
    EXPECT_TRUE(r.ok()) << r.status();
    return r.value_or(iscsi::Reservations{});
  }

  static size_t Count(const iscsi::Reservations& r, uint64_t key) {
    return static_cast<size_t>(std::count(r.keys.begin(), r.keys.end(), key));
  }

  const uint64_t key_a_ = iscsi::NodeKey("node-a", 0);
  const uint64_t key_b_ = iscsi::NodeKey("node-b", 0);
};

// The first node reserves; the second is refused, names the holder's key, and is left
// unregistered (under Write Exclusive - Registrants Only a registrant could write).
TEST_F(ReservationClaimTest, OneNodeHoldsTheLunAndTheOtherIsRefusedUnregistered) {
  auto a = LoginAs(kNodeA);
  auto b = LoginAs(kNodeB);
  ASSERT_TRUE(a != nullptr && b != nullptr);

  ASSERT_TRUE(iscsi::ClaimReservation(*a, key_a_, /*held_at=*/std::nullopt).ok());
  const absl::Status refused = iscsi::ClaimReservation(*b, key_b_, std::nullopt).status();

  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), iscsi::FormatKey(key_a_))) << refused;
  const iscsi::Reservations now = Now();
  EXPECT_EQ(now.holder, key_a_);
  EXPECT_EQ(now.type, iscsi::kWriteExclusiveRegistrantsOnly);
  EXPECT_EQ(now.keys, std::vector<uint64_t>{key_a_}) << "node-b left no registration";
  EXPECT_TRUE(iscsi::ReleaseReservation(*a, key_a_).ok());
}

// A reconnect, or a successor process, is a new nexus: the registration and reservation of the
// one it lost stay behind as orphans. The new login takes them over and removes the orphan.
TEST_F(ReservationClaimTest, ANewLoginOfTheHolderTakesItsReservationBackFromTheLostNexus) {
  uint32_t held_at = 0;
  {
    auto first = LoginAs(kNodeA);
    ASSERT_NE(first, nullptr);
    auto claimed = iscsi::ClaimReservation(*first, key_a_, std::nullopt);
    ASSERT_TRUE(claimed.ok()) << claimed.status();
    held_at = *claimed;
  }  // Logged out: its registration and the reservation are orphaned.
  ASSERT_EQ(Now().holder, key_a_);
  auto again = LoginAs(kNodeA);
  ASSERT_NE(again, nullptr);

  const auto claimed = iscsi::ClaimReservation(*again, key_a_, held_at);

  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_GT(*claimed, held_at) << "the takeover moved the generation";
  const iscsi::Reservations now = Now();
  EXPECT_EQ(now.holder, key_a_);
  EXPECT_EQ(Count(now, key_a_), 1u) << "the orphaned registration is gone";
  auto b = LoginAs(kNodeB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(iscsi::ClaimReservation(*b, key_b_, std::nullopt).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(iscsi::ReleaseReservation(*again, key_a_).ok());
}

// Another node preempts the holder (a takeover): the old holder's next login is fenced, and
// nothing of it is registered afterwards; the new holder keeps the LUN.
TEST_F(ReservationClaimTest, AHolderThatWasPreemptedIsFencedAndStaysUnregistered) {
  auto a = LoginAs(kNodeA);
  ASSERT_NE(a, nullptr);
  auto held_at = iscsi::ClaimReservation(*a, key_a_, std::nullopt);
  ASSERT_TRUE(held_at.ok()) << held_at.status();
  a.reset();  // Node A is cut off.
  auto b = LoginAs(kNodeB);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->ReserveOut(ReserveAction::kRegister, 0, key_b_, 0).ok());
  ASSERT_TRUE(
      b->ReserveOut(ReserveAction::kPreempt, key_b_, key_a_, iscsi::kWriteExclusiveRegistrantsOnly)
          .ok());

  auto back = LoginAs(kNodeA);
  ASSERT_NE(back, nullptr);
  const absl::Status fenced = iscsi::ClaimReservation(*back, key_a_, *held_at).status();
  EXPECT_EQ(iscsi::JoinReservation(*back, key_a_).code(), absl::StatusCode::kPermissionDenied);

  EXPECT_EQ(fenced.code(), absl::StatusCode::kPermissionDenied) << fenced;
  const iscsi::Reservations now = Now();
  EXPECT_EQ(now.holder, key_b_);
  EXPECT_EQ(now.keys, std::vector<uint64_t>{key_b_});
  EXPECT_TRUE(iscsi::ReleaseReservation(*back, key_a_).ok()) << "nothing of node-a to release";
  EXPECT_EQ(Now().keys, std::vector<uint64_t>{key_b_});
  EXPECT_TRUE(iscsi::ReleaseReservation(*b, key_b_).ok());
}

// A release on a new login gives up what the node held through a lost nexus too: no
// registration and no reservation remain, and the other node claims the LUN at once.
TEST_F(ReservationClaimTest, AReleaseLeavesNothingAndTheOtherNodeClaimsAtOnce) {
  {
    auto first = LoginAs(kNodeA);
    ASSERT_NE(first, nullptr);
    ASSERT_TRUE(iscsi::ClaimReservation(*first, key_a_, std::nullopt).ok());
  }
  auto a = LoginAs(kNodeA);
  ASSERT_NE(a, nullptr);

  ASSERT_TRUE(iscsi::ReleaseReservation(*a, key_a_).ok());

  const iscsi::Reservations now = Now();
  EXPECT_TRUE(now.keys.empty()) << now.keys.size() << " registration(s) left";
  EXPECT_FALSE(now.holder.has_value());
  auto b = LoginAs(kNodeB);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(iscsi::ClaimReservation(*b, key_b_, std::nullopt).ok());
  EXPECT_TRUE(iscsi::ReleaseReservation(*b, key_b_).ok());
}

// A process that takes a volume over while the holder's nexus still serves (an upgrade) joins
// it: both nexuses are registered, the reservation stays, and the other node is still refused.
TEST_F(ReservationClaimTest, ANexusJoinsTheHoldersRegistrationWithoutTakingItAway) {
  auto a = LoginAs(kNodeA);
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(iscsi::ClaimReservation(*a, key_a_, std::nullopt).ok());
  auto joining = LoginAs(kNodeA);
  ASSERT_NE(joining, nullptr);

  const absl::Status joined = iscsi::JoinReservation(*joining, key_a_);

  ASSERT_TRUE(joined.ok()) << joined;
  const iscsi::Reservations now = Now();
  EXPECT_EQ(now.holder, key_a_);
  EXPECT_EQ(Count(now, key_a_), 2u);
  auto b = LoginAs(kNodeB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(iscsi::JoinReservation(*b, key_b_).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(iscsi::ReleaseReservation(*joining, key_a_).ok());
  EXPECT_TRUE(Now().keys.empty());
}

}  // namespace
}  // namespace stagehand::testing

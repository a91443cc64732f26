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

#include <absl/strings/cord.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
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

  auto claimed = iscsi::ClaimReservation(*a, key_a_, /*held_at=*/std::nullopt);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  const absl::Status refused = iscsi::ClaimReservation(*b, key_b_, std::nullopt).status();

  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), iscsi::FormatKey(claimed->key))) << refused;
  EXPECT_EQ(refused.GetPayload(iscsi::kHolderKeyPayload), absl::Cord(absl::StrCat(claimed->key)));
  EXPECT_TRUE(iscsi::SameNode(claimed->key, key_a_)) << "a key of node-a's";
  const iscsi::Reservations now = ReservationsNow();
  EXPECT_EQ(now.holder, claimed->key);
  EXPECT_EQ(now.type, iscsi::kWriteExclusiveRegistrantsOnly);
  EXPECT_EQ(now.keys, std::vector<uint64_t>{claimed->key}) << "node-b left no registration";
  EXPECT_TRUE(iscsi::ReleaseReservation(*a, key_a_).ok());
}

// A reconnect, or a successor process, is a new nexus: the registration and reservation of the
// one it lost stay behind as orphans. The new login takes them over under a fresh key and
// removes the orphan.
TEST_F(ReservationClaimTest, ANewLoginOfTheHolderTakesItsReservationBackFromTheLostNexus) {
  iscsi::Claim first_claim;
  {
    auto first = LoginAs(kNodeA);
    ASSERT_NE(first, nullptr);
    auto claimed = iscsi::ClaimReservation(*first, key_a_, std::nullopt);
    ASSERT_TRUE(claimed.ok()) << claimed.status();
    first_claim = *claimed;
  }  // Logged out: its registration and the reservation are orphaned.
  ASSERT_EQ(ReservationsNow().holder, first_claim.key);
  auto again = LoginAs(kNodeA);
  ASSERT_NE(again, nullptr);

  const auto claimed = iscsi::ClaimReservation(*again, key_a_, first_claim.generation);

  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_GT(claimed->generation, first_claim.generation) << "the takeover moved the generation";
  EXPECT_NE(claimed->key, first_claim.key) << "a fresh key";
  const iscsi::Reservations now = ReservationsNow();
  EXPECT_EQ(now.holder, claimed->key);
  EXPECT_EQ(now.keys, std::vector<uint64_t>{claimed->key}) << "the orphaned registration is gone";
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
  auto held = iscsi::ClaimReservation(*a, key_a_, std::nullopt);
  ASSERT_TRUE(held.ok()) << held.status();
  a.reset();  // Node A is cut off.
  auto b = LoginAs(kNodeB);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->ReserveOut(ReserveAction::kRegister, 0, key_b_, 0).ok());
  ASSERT_TRUE(b->ReserveOut(ReserveAction::kPreempt, key_b_, held->key,
                            iscsi::kWriteExclusiveRegistrantsOnly)
                  .ok());

  auto back = LoginAs(kNodeA);
  ASSERT_NE(back, nullptr);
  const absl::Status fenced = iscsi::ClaimReservation(*back, key_a_, held->generation).status();
  EXPECT_EQ(iscsi::JoinReservation(*back, key_a_).status().code(),
            absl::StatusCode::kPermissionDenied);

  EXPECT_EQ(fenced.code(), absl::StatusCode::kPermissionDenied) << fenced;
  const iscsi::Reservations now = ReservationsNow();
  EXPECT_EQ(now.holder, key_b_);
  EXPECT_EQ(now.keys, std::vector<uint64_t>{key_b_});
  EXPECT_TRUE(iscsi::ReleaseReservation(*back, key_a_).ok()) << "nothing of node-a to release";
  EXPECT_EQ(ReservationsNow().keys, std::vector<uint64_t>{key_b_});
  EXPECT_TRUE(iscsi::ReleaseReservation(*b, key_b_).ok());
}

// A holder whose key stood still for the takeover time is taken over by the node that names
// that key, with every registration of its node; a holder whose key moved is not.
TEST_F(ReservationClaimTest, AStillKeyIsTakenOverAndAMovedOneIsNot) {
  auto a = LoginAs(kNodeA);
  auto b = LoginAs(kNodeB);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  auto held = iscsi::ClaimReservation(*a, key_a_, std::nullopt);
  ASSERT_TRUE(held.ok()) << held.status();
  auto orphan = LoginAs(kNodeA);  // A second registration of node A's.
  ASSERT_TRUE(orphan != nullptr && iscsi::JoinReservation(*orphan, key_a_).ok());
  const uint64_t seen = held->key;
  // Node A renews: its key moves.
  const uint64_t renewed = iscsi::FreshKey(key_a_, {seen});
  ASSERT_TRUE(a->ReserveOut(ReserveAction::kRegister, seen, renewed, 0).ok());

  const absl::Status refused = iscsi::ClaimReservation(*b, key_b_, std::nullopt, seen).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_EQ(ReservationsNow().holder, renewed);

  auto taken = iscsi::ClaimReservation(*b, key_b_, std::nullopt, renewed);

  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->took_over_from, renewed);
  const iscsi::Reservations now = ReservationsNow();
  EXPECT_EQ(now.holder, taken->key);
  EXPECT_EQ(now.keys, std::vector<uint64_t>{taken->key}) << "nothing of node A is registered";
  EXPECT_EQ(iscsi::ClaimReservation(*a, key_a_, held->generation).status().code(),
            absl::StatusCode::kPermissionDenied)
      << "node A is fenced";
  EXPECT_TRUE(iscsi::ReleaseReservation(*b, key_b_).ok());
}

// A release on a new login gives up what the node held through a lost nexus too: no
// registration and no reservation remain, and the other node claims the LUN at once.
TEST_F(ReservationClaimTest, AReleaseLeavesNothingAndTheOtherNodeClaimsAtOnce) {
  uint64_t held_key = 0;
  {
    auto first = LoginAs(kNodeA);
    ASSERT_NE(first, nullptr);
    auto claimed = iscsi::ClaimReservation(*first, key_a_, std::nullopt);
    ASSERT_TRUE(claimed.ok()) << claimed.status();
    held_key = claimed->key;
  }
  auto a = LoginAs(kNodeA);
  ASSERT_NE(a, nullptr);

  ASSERT_TRUE(iscsi::ReleaseReservation(*a, key_a_).ok());

  const iscsi::Reservations now = ReservationsNow();
  EXPECT_TRUE(now.keys.empty()) << now.keys.size() << " registration(s) left";
  EXPECT_FALSE(now.holder.has_value());
  auto b = LoginAs(kNodeB);
  ASSERT_NE(b, nullptr);
  // Even where it had waited for node A's key to stand still: released, it preempts nothing.
  auto claimed = iscsi::ClaimReservation(*b, key_b_, std::nullopt, /*takeover_key=*/held_key);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  EXPECT_EQ(claimed->took_over_from, 0u);
  EXPECT_TRUE(iscsi::ReleaseReservation(*b, key_b_).ok());
}

// A process that takes a volume over while the holder's nexus still serves (an upgrade) joins
// it: both nexuses are registered, the reservation stays, and the other node is still refused.
TEST_F(ReservationClaimTest, ANexusJoinsTheHoldersRegistrationWithoutTakingItAway) {
  auto a = LoginAs(kNodeA);
  ASSERT_NE(a, nullptr);
  auto held = iscsi::ClaimReservation(*a, key_a_, std::nullopt);
  ASSERT_TRUE(held.ok()) << held.status();
  auto joining = LoginAs(kNodeA);
  ASSERT_NE(joining, nullptr);

  const auto joined = iscsi::JoinReservation(*joining, key_a_);

  ASSERT_TRUE(joined.ok()) << joined.status();
  const iscsi::Reservations now = ReservationsNow();
  EXPECT_EQ(now.holder, held->key);
  EXPECT_EQ(now.keys.size(), 2u);
  EXPECT_EQ(Count(now, *joined), 1u);
  auto b = LoginAs(kNodeB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(iscsi::JoinReservation(*b, key_b_).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(iscsi::ReleaseReservation(*joining, key_a_).ok());
  EXPECT_TRUE(ReservationsNow().keys.empty());
}

}  // namespace
}  // namespace stagehand::testing

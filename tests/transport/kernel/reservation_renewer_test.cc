#include "transport/kernel/reservation_renewer.h"

#include <chrono>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "iscsi/persistent_reservation.h"
#include "iscsi/reservation_claim.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/transport/kernel/fake_reservation_target.h"

namespace stagehand::transport::kernel {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

// Node A's paths are the disks "sda" and "sdb"; node B's is "other".
class ReservationRenewerTest : public ::testing::Test {
 protected:
  OpenReservations Open() {
    return
        [this](
            const std::string& disk) -> absl::StatusOr<std::unique_ptr<iscsi::ReservationChannel>> {
          return target_.Nexus(disk);
        };
  }

  absl::StatusOr<state::v1::KernelReservation> ClaimA(uint64_t* took = nullptr) {
    auto claimed = ClaimPaths(Open(), {"sda", "sdb"}, key_a_, 0, 0, took);
    if (claimed.ok()) {
      claimed->set_renew_seconds(10);
    }
    return claimed;
  }

  state::v1::KernelReservation ReadFile() {
    state::v1::KernelReservation r;
    auto text = ReadFileToString(file_);
    EXPECT_TRUE(text.ok() && r.ParseFromString(*text));
    return r;
  }

  static std::chrono::steady_clock::time_point Later() {
    return std::chrono::steady_clock::now() + std::chrono::seconds(11);
  }

  testing::FakeReservationTarget target_;
  ::stagehand::testing::TempDir dir_;
  const std::string file_ = dir_.path() + "/kernel-reservation";
  const uint64_t key_a_ = iscsi::NodeKey("node-a", 0);
  const uint64_t key_b_ = iscsi::NodeKey("node-b", 0);
};

TEST_F(ReservationRenewerTest, ClaimRegistersEveryPathAndTheFirstHolds) {
  auto claimed = ClaimA();
  ASSERT_THAT(claimed.status(), IsOk());
  ASSERT_EQ(claimed->paths_size(), 2);
  EXPECT_EQ(target_.holder(), "sda");
  EXPECT_EQ(target_.KeyOf("sda"), claimed->paths(0).key());
  EXPECT_EQ(target_.KeyOf("sdb"), claimed->paths(1).key());
  EXPECT_TRUE(iscsi::IsNodeKey(claimed->paths(1).key(), "node-a"));
  EXPECT_NE(claimed->paths(0).key(), claimed->paths(1).key());

  ASSERT_THAT(ReleasePaths(Open(), *claimed), IsOk());
  EXPECT_EQ(target_.registrations(), 0u);
  EXPECT_FALSE(target_.holder().has_value());
}

TEST_F(ReservationRenewerTest, AnotherNodeHoldingIsUnavailableAndLeavesNothingRegistered) {
  ASSERT_THAT(ClaimA().status(), IsOk());
  const uint64_t held = target_.KeyOf("sda");
  auto refused = ClaimPaths(Open(), {"other"}, key_b_, 0, 0, nullptr);
  EXPECT_THAT(refused.status(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(iscsi::HolderKeyOf(refused.status()), held);
  EXPECT_EQ(target_.KeyOf("other"), 0u);
  // Renewing a path that does not hold the reservation moves the holder node's digest.
  const uint64_t digest = iscsi::HolderNodeKeysOf(refused.status());
  EXPECT_NE(digest, 0u);
  ASSERT_THAT(
      target_.Nexus("sdb")->ReserveOut(iscsi::ReserveAction::kRegister, target_.KeyOf("sdb"),
                                       iscsi::FreshKey(key_a_, {}), 0),
      IsOk());
  const absl::Status again = ClaimPaths(Open(), {"other"}, key_b_, 0, 0, nullptr).status();
  EXPECT_EQ(iscsi::HolderKeyOf(again), held);
  EXPECT_NE(iscsi::HolderNodeKeysOf(again), digest);

  // The holder's key stood still, but another path of its node renewed since the digest was
  // seen: alive, not taken over.
  EXPECT_THAT(ClaimPaths(Open(), {"other"}, key_b_, held, digest, nullptr).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(target_.holder(), "sda");

  // The holder's key and its node's keys unchanged for the takeover time: taken over, every path
  // of A removed.
  uint64_t took = 0;
  auto taken = ClaimPaths(Open(), {"other"}, key_b_, held, iscsi::HolderNodeKeysOf(again), &took);
  ASSERT_THAT(taken.status(), IsOk());
  EXPECT_EQ(took, held);
  EXPECT_EQ(target_.holder(), "other");
  EXPECT_EQ(target_.KeyOf("sda"), 0u);
  EXPECT_EQ(target_.KeyOf("sdb"), 0u);
}

TEST_F(ReservationRenewerTest, RenewalMovesEveryKeyAndKeepsTheReservation) {
  auto claimed = ClaimA();
  ASSERT_THAT(claimed.status(), IsOk());
  ReservationRenewer renewer(Open(), /*background=*/false);
  ASSERT_THAT(renewer.Hold(file_, *claimed), IsOk());
  const uint64_t before_a = target_.KeyOf("sda");
  const uint64_t before_b = target_.KeyOf("sdb");

  renewer.RenewDue(std::chrono::steady_clock::now());  // Not due yet.
  EXPECT_EQ(target_.KeyOf("sda"), before_a);

  renewer.RenewDue(Later());
  EXPECT_NE(target_.KeyOf("sda"), before_a);
  EXPECT_NE(target_.KeyOf("sdb"), before_b);
  EXPECT_TRUE(iscsi::IsNodeKey(target_.KeyOf("sda"), "node-a"));
  EXPECT_EQ(target_.holder(), "sda");
  auto state = renewer.Get(file_);
  ASSERT_TRUE(state.has_value());
  EXPECT_FALSE(state->fenced);
  EXPECT_EQ(state->key, target_.KeyOf("sda"));
  // The file names the keys the target has, so that a restarted agent carries on.
  const state::v1::KernelReservation kept = ReadFile();
  ASSERT_EQ(kept.paths_size(), 2);
  EXPECT_EQ(kept.paths(0).key(), target_.KeyOf("sda"));
  EXPECT_EQ(kept.paths(1).key(), target_.KeyOf("sdb"));
  EXPECT_EQ(kept.paths(0).next(), 0u);
  EXPECT_EQ(kept.generation(), target_.generation());
}

TEST_F(ReservationRenewerTest, APathThatIsDownKeepsItsKeyAndIsNotFenced) {
  auto claimed = ClaimA();
  ASSERT_THAT(claimed.status(), IsOk());
  ReservationRenewer renewer(Open(), false);
  ASSERT_THAT(renewer.Hold(file_, *claimed), IsOk());
  const uint64_t before_b = target_.KeyOf("sdb");
  target_.SetDown("sdb", true);
  renewer.RenewDue(Later());
  EXPECT_EQ(target_.KeyOf("sdb"), before_b);
  EXPECT_FALSE(renewer.Get(file_)->fenced);
  target_.SetDown("sdb", false);
  renewer.RenewDue(Later() + std::chrono::seconds(11));
  EXPECT_NE(target_.KeyOf("sdb"), before_b);
}

// A REGISTER whose answer is lost may have moved the key: the next round asks the target which
// key the path has, instead of taking a conflict on the old one for a takeover.
TEST_F(ReservationRenewerTest, ARenewalWhoseAnswerIsLostIsSettledNotFenced) {
  auto claimed = ClaimA();
  ASSERT_THAT(claimed.status(), IsOk());
  ReservationRenewer renewer(Open(), false);
  ASSERT_THAT(renewer.Hold(file_, *claimed), IsOk());
  const uint64_t before = target_.KeyOf("sda");
  target_.LoseNextAnswer("sda");
  renewer.RenewDue(Later());
  EXPECT_NE(target_.KeyOf("sda"), before) << "the REGISTER ran";
  EXPECT_NE(ReadFile().paths(0).next(), 0u) << "the file keeps the key it may have moved to";
  renewer.RenewDue(Later() + std::chrono::seconds(11));
  auto state = renewer.Get(file_);
  ASSERT_TRUE(state.has_value());
  EXPECT_FALSE(state->fenced) << state->message;
  EXPECT_EQ(target_.holder(), "sda");
  EXPECT_EQ(ReadFile().paths(0).key(), target_.KeyOf("sda"));
}

TEST_F(ReservationRenewerTest, TakenOverIsFencedAndNeverRegistersAgain) {
  auto claimed = ClaimA();
  ASSERT_THAT(claimed.status(), IsOk());
  ReservationRenewer renewer(Open(), false);
  ASSERT_THAT(renewer.Hold(file_, *claimed), IsOk());
  auto taken = ClaimPaths(Open(), {"other"}, key_b_, target_.KeyOf("sda"), 0, nullptr);
  ASSERT_THAT(taken.status(), IsOk());

  renewer.RenewDue(Later());
  auto state = renewer.Get(file_);
  ASSERT_TRUE(state.has_value());
  EXPECT_TRUE(state->fenced);
  EXPECT_EQ(state->holder, target_.KeyOf("other"));
  EXPECT_THAT(state->message, ::testing::HasSubstr("took this node's reservation"));
  EXPECT_EQ(target_.KeyOf("sda"), 0u);
  EXPECT_EQ(target_.KeyOf("sdb"), 0u);
  renewer.RenewDue(Later() + std::chrono::seconds(11));  // Fenced: no renewal at all.
  EXPECT_EQ(target_.KeyOf("sda"), 0u);

  // Giving the volume up leaves the new holder alone.
  auto dropped = renewer.Drop(file_);
  ASSERT_TRUE(dropped.has_value());
  ASSERT_THAT(ReleasePaths(Open(), *dropped), IsOk());
  EXPECT_EQ(target_.holder(), "other");
  EXPECT_EQ(target_.registrations(), 1u);
}

TEST_F(ReservationRenewerTest, ATargetThatForgotEverythingIsClaimedAgain) {
  auto claimed = ClaimA();
  ASSERT_THAT(claimed.status(), IsOk());
  ReservationRenewer renewer(Open(), false);
  ASSERT_THAT(renewer.Hold(file_, *claimed), IsOk());
  renewer.RenewDue(Later());  // Records a generation above a fresh target's.
  target_.Forget();
  renewer.RenewDue(Later() + std::chrono::seconds(11));
  EXPECT_FALSE(renewer.Get(file_)->fenced);
  EXPECT_EQ(target_.holder(), "sda");
  EXPECT_TRUE(iscsi::IsNodeKey(target_.KeyOf("sdb"), "node-a"));
}

TEST_F(ReservationRenewerTest, ARestartedAgentCarriesOnFromTheFileAfterARenewalCutShort) {
  auto claimed = ClaimA();
  ASSERT_THAT(claimed.status(), IsOk());
  {
    ReservationRenewer renewer(Open(), false);
    ASSERT_THAT(renewer.Hold(file_, *claimed), IsOk());
  }
  // The agent died between "next" written and the file rewritten: the target has the new key.
  state::v1::KernelReservation cut = ReadFile();
  const uint64_t next = iscsi::FreshKey(key_a_, {cut.paths(0).key(), cut.paths(1).key()});
  ASSERT_THAT(target_.Nexus("sda")->ReserveOut(iscsi::ReserveAction::kRegister, cut.paths(0).key(),
                                               next, 0),
              IsOk());
  cut.mutable_paths(0)->set_next(next);
  ASSERT_THAT(WriteFileAtomically(file_, cut.SerializeAsString(), 0600), IsOk());

  ReservationRenewer restarted(Open(), false);
  ASSERT_THAT(restarted.Resume(file_), IsOk());
  restarted.RenewDue(std::chrono::steady_clock::now());  // Due at once after a resume.
  auto state = restarted.Get(file_);
  ASSERT_TRUE(state.has_value());
  EXPECT_FALSE(state->fenced) << state->message;
  EXPECT_NE(target_.KeyOf("sda"), next);
  EXPECT_EQ(target_.holder(), "sda");
  EXPECT_EQ(ReadFile().paths(0).key(), target_.KeyOf("sda"));
}

TEST_F(ReservationRenewerTest, ResumeWithoutAFileHoldsNothing) {
  ReservationRenewer renewer(Open(), false);
  EXPECT_THAT(renewer.Resume(file_), IsOk());
  EXPECT_FALSE(renewer.Get(file_).has_value());
  EXPECT_FALSE(renewer.Drop(file_).has_value());
}

}  // namespace
}  // namespace stagehand::transport::kernel

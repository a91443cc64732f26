// stagehandctl's iscsi commands against the suite's tgtd: SendTargets discovery
// (iscsi/discovery.h), a probe of one LUN (iscsi::Connection) and its persistent reservation,
// as a person debugging a target runs them.

#include <memory>
#include <string>
#include <vector>

#include <absl/strings/match.h>
#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "iscsi/libiscsi_connection.h"
#include "iscsi/persistent_reservation.h"
#include "tests/integration/node_test_base.h"

#ifndef STAGEHANDCTL_BINARY
#error "STAGEHANDCTL_BINARY must be defined (the stagehandctl binary under test)"
#endif

namespace stagehand::testing {
namespace {

class StagehandctlIscsiTest : public NodeIntegrationTest {
 protected:
  ProcessResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), STAGEHANDCTL_BINARY);
    auto r = RunProcess(args);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : ProcessResult{};
  }
};

TEST_F(StagehandctlIscsiTest, DiscoverListsTheTargetWithItsPortal) {
  AddLun();
  const ProcessResult r = Ctl({"-o", "json", "iscsi", "discover", "--portal", tgtd_->portal()});

  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, Iqn())) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, tgtd_->portal())) << r.output;
}

TEST_F(StagehandctlIscsiTest, ProbeReadsTheLunsCapacity) {
  AddLun(64ull << 20);
  const ProcessResult r = Ctl(
      {"-o", "json", "iscsi", "probe", "--portal", tgtd_->portal(), "--iqn", Iqn(), "--lun", "1"});

  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, std::to_string(64ull << 20))) << r.output;
}

// Two initiators of two nodes on one LUN: node-a registers and reserves it (Write Exclusive -
// Registrants Only); `iscsi reservation` names the holder and every key by its node; node-b
// cannot reserve while node-a holds it, and can once node-a released and unregistered.
TEST_F(StagehandctlIscsiTest, ReservationNamesTheHolderAndEveryKeyByNode) {
  using iscsi::ReserveAction;
  AddLun();
  auto a = LoginAs("iqn.2026-12.dev.stagehand:node-a");
  auto b = LoginAs("iqn.2026-12.dev.stagehand:node-b");
  ASSERT_TRUE(a != nullptr && b != nullptr);
  const uint64_t key_a = iscsi::NodeKey("node-a", 1);
  const uint64_t key_b = iscsi::NodeKey("node-b", 7);
  constexpr uint8_t kType = iscsi::kWriteExclusiveRegistrantsOnly;
  ASSERT_TRUE(a->ReserveOut(ReserveAction::kRegister, 0, key_a, 0).ok());
  ASSERT_TRUE(a->ReserveOut(ReserveAction::kReserve, key_a, 0, kType).ok());
  ASSERT_TRUE(b->ReserveOut(ReserveAction::kRegister, 0, key_b, 0).ok());

  const absl::Status refused = b->ReserveOut(ReserveAction::kReserve, key_b, 0, kType);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "RESERVATION CONFLICT")) << refused;
  const ProcessResult shown =
      Ctl({"iscsi", "reservation", "--portal", tgtd_->portal(), "--iqn", Iqn(), "--lun", "1",
           "--node-id", "node-a", "--node-id", "node-b"});
  ASSERT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_TRUE(absl::StrContains(shown.output, iscsi::FormatKey(key_a) +
                                                  " (node node-a), Write Exclusive - Registrants "
                                                  "Only"))
      << shown.output;
  EXPECT_TRUE(absl::StrContains(shown.output, iscsi::FormatKey(key_b) + " (node node-b)"))
      << shown.output;
  const ProcessResult key = Ctl({"iscsi", "key", "--node-id", "node-a"});
  ASSERT_EQ(key.exit_code, 0) << key.output;
  EXPECT_TRUE(absl::StrContains(key.output, iscsi::FormatKey(key_a).substr(0, 10))) << key.output;

  ASSERT_TRUE(a->ReserveOut(ReserveAction::kRelease, key_a, 0, kType).ok());
  ASSERT_TRUE(a->ReserveOut(ReserveAction::kRegister, key_a, 0, 0).ok());  // Unregisters.
  EXPECT_TRUE(b->ReserveOut(ReserveAction::kReserve, key_b, 0, kType).ok());
  auto state = b->ReadReservations();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->keys, std::vector<uint64_t>{key_b});
  EXPECT_EQ(state->holder, key_b);
  EXPECT_TRUE(b->ReserveOut(ReserveAction::kRelease, key_b, 0, kType).ok());
  EXPECT_TRUE(b->ReserveOut(ReserveAction::kRegister, key_b, 0, 0).ok());
}

TEST_F(StagehandctlIscsiTest, NothingListeningFailsWithTheReason) {
  // Port 1 on loopback: nothing listens there, so the connect is refused at once.
  const ProcessResult discover = Ctl({"iscsi", "discover", "--portal", "127.0.0.1:1"});
  EXPECT_NE(discover.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(discover.output, "127.0.0.1:1")) << discover.output;

  const ProcessResult probe =
      Ctl({"iscsi", "probe", "--portal", "127.0.0.1:1", "--iqn", Iqn(), "--lun", "1"});
  EXPECT_NE(probe.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(probe.output, "127.0.0.1:1")) << probe.output;
}

}  // namespace
}  // namespace stagehand::testing

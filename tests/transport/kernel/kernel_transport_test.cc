#include "transport/kernel/kernel_transport.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "iscsi/persistent_reservation.h"
#include "iscsi/reservation_claim.h"
#include "iscsi/state_conversions.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"
#include "tests/transport/kernel/fake_kernel_host.h"
#include "tests/transport/kernel/fake_reservation_target.h"

namespace stagehand::transport::kernel {
namespace {

namespace fs = std::filesystem;
using fake_kernel_host::FakeHost;
using fake_kernel_host::IdentityOf;
using fake_kernel_host::Read;
using fake_kernel_host::Request;
using fake_kernel_host::Spec;
using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(KernelTransportTest, AttachLogsInScansOneLunAndDetachLogsOut) {
  FakeHost host;
  host.chap_password = "s3cret-pw";
  KernelTransport t(host.Options());
  AttachRequest req = Request(1);
  Spec(req).session_chap = iscsi::ChapCredentials{"user", "s3cret-pw", "", ""};
  Spec(req).expected_serial = "SER1";

  auto a = t.Attach(req);

  ASSERT_THAT(a, IsOk());
  EXPECT_THAT(a->device, HasSubstr("/dev/sda"));
  EXPECT_EQ(IdentityOf(*a).serial, "SER1");
  EXPECT_EQ(a->capacity.Bytes(), 1024u * 1024 * 1024);
  EXPECT_EQ(a->session.kernel().paths_size(), 1);
  EXPECT_FALSE(host.DiskExists("sdb"));  // LUN 2 was not scanned.
  const std::string record = Read(host.NodeRecord("127.0.0.1:3260"));
  EXPECT_THAT(record, HasSubstr("node.startup = manual"));
  EXPECT_THAT(record, HasSubstr("node.session.scan = manual"));
  EXPECT_FALSE(host.AnyArgvContains("s3cret-pw"));  // Never on a command line.

  struct stat st {};

  ASSERT_EQ(stat(host.NodeRecord("127.0.0.1:3260").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(t.Health(a->session).Usable());

  ASSERT_THAT(t.Detach(a->session), IsOk());

  EXPECT_FALSE(host.DiskExists("sda"));
  EXPECT_EQ(host.Sessions(), 0);
  EXPECT_FALSE(fs::exists(host.NodeRecord("127.0.0.1:3260")));  // The secret is gone too.
  EXPECT_THAT(t.Detach(a->session), IsOk());                    // Idempotent.
}

// A single-node volume's attach, with the LUN's reservations kept by a fake target.
class KernelReservationTest : public ::testing::Test {
 protected:
  KernelReservationTest() {
    KernelTransportOptions o = host_.Options();
    o.open_reservations = [this](const std::string& disk)
        -> absl::StatusOr<std::unique_ptr<iscsi::ReservationChannel>> { return lun_.Nexus(disk); };
    transport_ = std::make_unique<KernelTransport>(std::move(o));
  }

  AttachRequest Reserved() {
    AttachRequest req = Request(1);
    req.runtime_dir = run_.path() + "/v";
    req.reservation_key = iscsi::NodeKey("node-a", 0);
    req.reservation_renew_seconds = 10;
    return req;
  }

  FakeHost host_;
  testing::FakeReservationTarget lun_;
  ::stagehand::testing::TempDir run_;
  std::unique_ptr<KernelTransport> transport_;
};

TEST_F(KernelReservationTest, ASingleNodeAttachReservesTheLunAndDetachReleasesIt) {
  auto a = transport_->Attach(Reserved());
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(lun_.holder(), "sda");
  EXPECT_TRUE(iscsi::IsNodeKey(lun_.KeyOf("sda"), "node-a"));
  const std::string file = a->session.kernel().reservation_file();
  EXPECT_TRUE(fs::exists(file));
  EXPECT_EQ(transport_->Describe(a->session).reservation_key, lun_.KeyOf("sda"));
  EXPECT_TRUE(transport_->Health(a->session).Usable());

  ASSERT_THAT(transport_->Detach(a->session), IsOk());
  EXPECT_EQ(lun_.registrations(), 0u);
  EXPECT_FALSE(lun_.holder().has_value());
  EXPECT_FALSE(fs::exists(file));
  EXPECT_FALSE(host_.DiskExists("sda"));
}

TEST_F(KernelReservationTest, AnotherNodesReservationRefusesTheAttachAndLeavesNothing) {
  auto theirs =
      iscsi::ClaimReservation(*lun_.Nexus("other"), iscsi::NodeKey("node-b", 0), std::nullopt);
  ASSERT_THAT(theirs.status(), IsOk());

  auto a = transport_->Attach(Reserved());

  EXPECT_THAT(a.status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("in use on another node")));
  EXPECT_EQ(iscsi::HolderKeyOf(a.status()), theirs->key);
  EXPECT_EQ(lun_.KeyOf("sda"), 0u);
  EXPECT_FALSE(host_.DiskExists("sda"));
  EXPECT_EQ(host_.Sessions(), 0);
}

TEST_F(KernelReservationTest, ATargetWithoutReservationsIsRefusedUnlessTheVolumeSaysOff) {
  lun_.unsupported = true;
  EXPECT_THAT(transport_->Attach(Reserved()).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("takeoverAfter")));
  EXPECT_EQ(host_.Sessions(), 0);

  AttachRequest off = Reserved();
  off.reservation_optional = true;
  auto a = transport_->Attach(off);
  ASSERT_THAT(a, IsOk());
  EXPECT_TRUE(a->session.kernel().unreserved());
  EXPECT_TRUE(transport_->Describe(a->session).unreserved);
  EXPECT_EQ(transport_->Health(a->session).reason, health::Reason::kUnreserved);
  ASSERT_THAT(transport_->Detach(a->session), IsOk());
}

// A multi-node single-writer volume: attached as a reader (no key), its writer claimed and
// given up later on the disks it has (Transport::SetWriter).
TEST_F(KernelReservationTest, AReaderBecomesTheWriterAndGivesItUpOnTheSameDisks) {
  AttachRequest reader = Reserved();
  reader.reservation_key = 0;
  auto a = transport_->Attach(reader);
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(lun_.registrations(), 0u);
  EXPECT_TRUE(a->session.kernel().reservation_file().empty());

  auto theirs =
      iscsi::ClaimReservation(*lun_.Nexus("other"), iscsi::NodeKey("node-b", 0), std::nullopt);
  ASSERT_THAT(theirs.status(), IsOk());
  auto refused = transport_->SetWriter(a->session, Reserved());
  EXPECT_THAT(refused.status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("in use on another node")));
  EXPECT_EQ(iscsi::HolderKeyOf(refused.status()), theirs->key);
  EXPECT_EQ(lun_.KeyOf("sda"), 0u);
  ASSERT_THAT(iscsi::ReleaseReservation(*lun_.Nexus("other"), theirs->key), IsOk());

  auto writer = transport_->SetWriter(a->session, Reserved());
  ASSERT_THAT(writer, IsOk());
  EXPECT_EQ(lun_.holder(), "sda");
  EXPECT_TRUE(iscsi::IsNodeKey(lun_.KeyOf("sda"), "node-a"));
  const std::string file = writer->session.kernel().reservation_file();
  EXPECT_TRUE(fs::exists(file));
  EXPECT_EQ(transport_->Describe(writer->session).reservation_key, lun_.KeyOf("sda"));
  auto again = transport_->SetWriter(writer->session, Reserved());
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->session.kernel().reservation_file(), file) << "idempotent";

  AttachRequest release = Reserved();
  release.reservation_key = 0;
  auto released = transport_->SetWriter(writer->session, release);
  ASSERT_THAT(released, IsOk());
  EXPECT_EQ(lun_.registrations(), 0u);
  EXPECT_FALSE(lun_.holder().has_value());
  EXPECT_FALSE(fs::exists(file));
  EXPECT_TRUE(released->session.kernel().reservation_file().empty());
  EXPECT_TRUE(host_.DiskExists("sda")) << "the volume stays attached";
  ASSERT_THAT(transport_->Detach(released->session), IsOk());
  EXPECT_FALSE(host_.DiskExists("sda"));
}

TEST(KernelTransportTest, WrongChapIsUnauthenticatedAndLeavesNothing) {
  FakeHost host;
  host.chap_password = "right";
  KernelTransport t(host.Options());
  AttachRequest req = Request(1);
  Spec(req).session_chap = iscsi::ChapCredentials{"user", "wrong", "", ""};

  EXPECT_THAT(t.Attach(req), StatusIs(absl::StatusCode::kUnauthenticated));

  EXPECT_EQ(host.Sessions(), 0);
  EXPECT_FALSE(fs::exists(host.NodeRecord("127.0.0.1:3260")));
}

TEST(KernelTransportTest, IdentityMismatchFailsClosedAndCleansUp) {
  FakeHost host;
  KernelTransport t(host.Options());
  AttachRequest req = Request(1);
  Spec(req).expected_serial = "OTHER";

  EXPECT_THAT(t.Attach(req), StatusIs(absl::StatusCode::kFailedPrecondition));

  EXPECT_FALSE(host.DiskExists("sda"));
  EXPECT_EQ(host.Sessions(), 0);
}

TEST(KernelTransportTest, MissingLunIsNotFound) {
  FakeHost host;
  KernelTransport t(host.Options());

  EXPECT_THAT(t.Attach(Request(7)), StatusIs(absl::StatusCode::kNotFound, HasSubstr("LUN 7")));

  EXPECT_EQ(host.Sessions(), 0);
}

TEST(KernelTransportTest, SharedSessionIsLoggedOutWithItsLastLun) {
  FakeHost host;
  KernelTransport t(host.Options());
  auto a = t.Attach(Request(1));
  auto b = t.Attach(Request(2));
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(host.Sessions(), 1);

  ASSERT_THAT(t.Detach(a->session), IsOk());
  EXPECT_EQ(host.Sessions(), 1);  // LUN 2 still uses it.
  EXPECT_TRUE(t.Health(b->session).Usable());

  ASSERT_THAT(t.Detach(b->session), IsOk());
  EXPECT_EQ(host.Sessions(), 0);
  EXPECT_EQ(host.logouts, 1);
}

TEST(KernelTransportTest, OtherChapCannotShareALoggedInSession) {
  FakeHost host;
  host.chap_password = "right";
  KernelTransport t(host.Options());
  AttachRequest first = Request(1);
  Spec(first).session_chap = iscsi::ChapCredentials{"user", "right", "", ""};
  auto a = t.Attach(first);
  ASSERT_THAT(a, IsOk());

  // The session exists, so the target would never see these: refused, nothing changed.
  AttachRequest wrong = Request(2);
  Spec(wrong).session_chap = iscsi::ChapCredentials{"user", "wrong", "", ""};
  EXPECT_THAT(t.Attach(wrong), StatusIs(absl::StatusCode::kUnauthenticated,
                                        HasSubstr("already logged in with other CHAP")));
  AttachRequest none = Request(2);
  EXPECT_THAT(t.Attach(none), StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_FALSE(host.DiskExists("sdb"));
  EXPECT_EQ(host.Sessions(), 1);
  EXPECT_THAT(Read(host.NodeRecord("127.0.0.1:3260")),
              HasSubstr("node.session.auth.password = right\n"));
  EXPECT_TRUE(t.Health(a->session).Usable());

  // The same credentials share it.
  AttachRequest same = Request(2);
  Spec(same).session_chap = iscsi::ChapCredentials{"user", "right", "", ""};
  auto b = t.Attach(same);
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(host.Sessions(), 1);
  ASSERT_THAT(t.Detach(b->session), IsOk());
  ASSERT_THAT(t.Detach(a->session), IsOk());
  EXPECT_EQ(host.Sessions(), 0);
}

TEST(KernelTransportTest, DetachLeavesADiskThatNowReportsAnotherLun) {
  FakeHost host;
  KernelTransport t(host.Options());
  auto a = t.Attach(Request(1));
  ASSERT_THAT(a, IsOk());
  state::v1::SessionRecord other = a->session;
  other.mutable_kernel()->mutable_identity()->set_serial("SOMEONE-ELSE");

  EXPECT_THAT(t.Detach(other), StatusIs(absl::StatusCode::kFailedPrecondition));

  EXPECT_TRUE(host.DiskExists("sda"));
  EXPECT_EQ(host.Sessions(), 1);
  EXPECT_EQ(t.Health(other).reason, health::Reason::kLunIdentityChanged);
}

TEST(KernelTransportTest, SeveralPortalsMakeOneMultipathDevice) {
  FakeHost host;
  KernelTransport t(host.Options());

  auto a = t.Attach(Request(1, {3260, 3261}));

  ASSERT_THAT(a, IsOk());
  EXPECT_THAT(a->device, HasSubstr("/dev/mapper/36000"));
  EXPECT_EQ(a->session.kernel().multipath_map(), "36000");
  EXPECT_EQ(host.Sessions(), 2);
  EXPECT_TRUE(t.Health(a->session).Usable());

  ASSERT_THAT(t.Detach(a->session), IsOk());
  EXPECT_FALSE(host.DiskExists("dm-0"));
  EXPECT_EQ(host.Sessions(), 0);
}

TEST(KernelTransportTest, AFailedSessionOfTheOnlyPathIsReconnecting) {
  FakeHost host;
  KernelTransport t(host.Options());
  auto a = t.Attach(Request(1, {3260}));
  ASSERT_THAT(a, IsOk());

  host.SetSessionState("127.0.0.1:3260", "FAILED");
  const SessionHealth h = t.Health(a->session);

  EXPECT_FALSE(h.Usable());
  EXPECT_EQ(h.reason, health::Reason::kSessionReconnecting);
  EXPECT_THAT(h.message, HasSubstr("127.0.0.1:3260 is FAILED"));
  host.SetSessionState("127.0.0.1:3260", "FREE");  // The recovery timeout ran out.
  EXPECT_EQ(t.Health(a->session).reason, health::Reason::kReplacementTimeoutPassed);
  host.SetSessionState("127.0.0.1:3260", "LOGGED_IN");
  EXPECT_TRUE(t.Health(a->session).Usable()) << "healthy again once it is logged in";
  EXPECT_EQ(t.Health(a->session).reason, std::nullopt);
  ASSERT_THAT(t.Detach(a->session), IsOk());
}

TEST(KernelTransportTest, AMapWithAFailedPathIsDegradedAndWithNoneDown) {
  FakeHost host;
  KernelTransport t(host.Options());
  auto a = t.Attach(Request(1, {3260, 3261}));
  ASSERT_THAT(a, IsOk());

  host.SetSessionState("127.0.0.1:3261", "FAILED");
  const SessionHealth one = t.Health(a->session);
  host.SetSessionState("127.0.0.1:3260", "FAILED");
  const SessionHealth none = t.Health(a->session);

  EXPECT_TRUE(one.Usable()) << "one working path serves the volume";
  EXPECT_EQ(one.reason, health::Reason::kMultipathDegraded);
  EXPECT_THAT(one.message, HasSubstr("1 of 2 paths working"));
  EXPECT_THAT(one.message, HasSubstr("127.0.0.1:3261 is FAILED"));
  EXPECT_FALSE(none.Usable());
  EXPECT_EQ(none.reason, health::Reason::kSessionReconnecting);
  ASSERT_THAT(t.Detach(a->session), IsOk());
}

TEST(KernelTransportTest, RefreshCapacityRescansAndChecksTheIdentity) {
  FakeHost host;
  KernelTransport t(host.Options());
  auto a = t.Attach(Request(1));
  ASSERT_THAT(a, IsOk());

  EXPECT_THAT(t.RefreshCapacity(a->session), IsOk());

  state::v1::SessionRecord other = a->session;
  other.mutable_kernel()->mutable_identity()->set_serial("SOMEONE-ELSE");
  EXPECT_THAT(t.RefreshCapacity(other), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_THAT(t.Detach(a->session), IsOk());
  EXPECT_THAT(t.RefreshCapacity(a->session), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(KernelTransportTest, AFailedAttachLeavesADiskThatWasAlreadyThere) {
  FakeHost host;
  KernelTransport t(host.Options());
  auto a = t.Attach(Request(1));  // Another volume's, on the same LUN.
  ASSERT_THAT(a, IsOk());
  AttachRequest second = Request(1);
  Spec(second).expected_serial = "OTHER";

  EXPECT_THAT(t.Attach(second), StatusIs(absl::StatusCode::kFailedPrecondition));

  EXPECT_TRUE(host.DiskExists("sda"));
  EXPECT_EQ(host.Sessions(), 1);
  EXPECT_TRUE(t.Health(a->session).Usable());
}

TEST(KernelTransportTest, AVetoedIdentityLeavesTheDiskAndSessionOfTheVolumeThatHasIt) {
  FakeHost host;
  KernelTransport t(host.Options());
  auto a = t.Attach(Request(1));  // Another volume's, on the same LUN.
  ASSERT_THAT(a, IsOk());
  AttachRequest second = Request(1);
  iscsi::LunIdentity vetted;
  state::v1::SessionRecord so_far;
  second.vet_identity = [&](const Identity& id, const state::v1::SessionRecord& session) {
    vetted = std::get<iscsi::LunIdentity>(id);
    so_far = session;
    return absl::FailedPreconditionError("the LUN is another volume's");
  };

  EXPECT_THAT(t.Attach(second), StatusIs(absl::StatusCode::kFailedPrecondition));

  EXPECT_EQ(vetted, IdentityOf(*a));
  // What a crash at the vet would leave recorded: the path, and the identity its disk must still
  // report before a cleanup deletes it.
  EXPECT_EQ(iscsi::FromProto(so_far.kernel().identity()), IdentityOf(*a));
  ASSERT_EQ(so_far.kernel().paths_size(), 1);
  EXPECT_EQ(so_far.kernel().paths(0).disk(), "sda");
  EXPECT_TRUE(host.DiskExists("sda"));
  EXPECT_EQ(host.Sessions(), 1);
  EXPECT_TRUE(t.Health(a->session).Usable());
}

TEST(KernelTransportTest, AVetoedNewPathLeavesTheMapOfTheVolumeThatHasTheLun) {
  FakeHost host;
  KernelTransport t(host.Options());
  auto a = t.Attach(Request(1, {3260, 3261}));  // Another volume's: a map over sda and sdb.
  ASSERT_THAT(a, IsOk());
  ASSERT_EQ(host.MapSlaves(), (std::vector<std::string>{"sda", "sdb"}));
  host.new_disks_join_the_map = true;
  AttachRequest second = Request(1, {3262});  // The same LUN through a portal `a` does not use.
  second.vet_identity = [](const Identity&, const state::v1::SessionRecord&) {
    return absl::FailedPreconditionError("the LUN is another volume's");
  };

  EXPECT_THAT(t.Attach(second), StatusIs(absl::StatusCode::kFailedPrecondition));

  EXPECT_THAT(host.commands, Contains(std::vector<std::string>{"multipathd", "del", "path", "sdc"}))
      << "the new path leaves the map";
  EXPECT_THAT(host.commands, Not(Contains(std::vector<std::string>{"multipath", "-f", "36000"})));
  EXPECT_FALSE(host.DiskExists("sdc"));
  EXPECT_TRUE(host.DiskExists("dm-0")) << "the other volume's map stays";
  EXPECT_EQ(host.MapSlaves(), (std::vector<std::string>{"sda", "sdb"}));
  EXPECT_EQ(host.Sessions(), 2);
  EXPECT_TRUE(t.Health(a->session).Usable());
}

TEST(SameAddressTest, ComparesAddressesNotTheirSpelling) {
  EXPECT_TRUE(iscsi::SameAddress("10.0.2.2", "10.0.2.2"));
  EXPECT_FALSE(iscsi::SameAddress("10.0.2.2", "10.0.2.3"));
  EXPECT_TRUE(iscsi::SameAddress("fd00::5", "fd00:0:0:0:0:0:0:5"));
  EXPECT_TRUE(iscsi::SameAddress("fe80::1%eth0", "fe80::1"));
  EXPECT_FALSE(iscsi::SameAddress("fe80::1", "fe80::2"));
  EXPECT_FALSE(iscsi::SameAddress("example.com", "10.0.2.2"));
}

TEST(KernelTransportTest, TwoPortalsWithTheSameAddressAreInvalid) {
  FakeHost host;
  KernelTransport t(host.Options());
  AttachRequest req = Request(1, {3260});
  Spec(req).portals.push_back(
      iscsi::Portal{"127.0.0.1", 3260});  // E.g. a host name and its address.

  EXPECT_THAT(t.Attach(req), StatusIs(absl::StatusCode::kInvalidArgument));

  EXPECT_EQ(host.Sessions(), 0);
}

TEST(KernelTransportTest, ALunBackUnderAnotherNameIsNotHealthy) {
  FakeHost host;
  KernelTransport t(host.Options());
  auto a = t.Attach(Request(1));
  ASSERT_THAT(a, IsOk());
  state::v1::SessionRecord renamed = a->session;
  renamed.mutable_kernel()->mutable_paths(0)->set_disk("sdq");

  const SessionHealth h = t.Health(renamed);

  EXPECT_FALSE(h.Usable());
  EXPECT_THAT(h.message, HasSubstr("now sda"));
}

TEST(KernelTransportTest, DetachDeletesAScsiDeviceWithoutBlockDeviceAndLogsOut) {
  FakeHost host;
  KernelTransport t(host.Options());
  auto a = t.Attach(Request(1));
  ASSERT_THAT(a, IsOk());
  host.DropBlockDevice(1);

  ASSERT_THAT(t.Detach(a->session), IsOk());

  EXPECT_EQ(host.Sessions(), 0);
}

TEST(KernelTransportTest, PreparedRecordUndoesACutShortAttach) {
  FakeHost host;
  KernelTransport t(host.Options());
  state::v1::SessionRecord prepared;
  t.Prepare(Request(1), &prepared);
  ASSERT_THAT(t.Attach(Request(1)), IsOk());  // As if the agent died right after.

  ASSERT_THAT(t.Detach(prepared), IsOk());

  EXPECT_FALSE(host.DiskExists("sda"));
  EXPECT_EQ(host.Sessions(), 0);
}

}  // namespace
}  // namespace stagehand::transport::kernel

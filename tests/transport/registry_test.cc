#include "transport/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/fakes/fake_transport.h"
#include "tests/testing/status_matchers.h"
#include "transport/session_record.h"

namespace stagehand::transport {
namespace {

using ::stagehand::testing::FakeTransport;
using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

AttachRequest RequestFor(std::string transport) {
  AttachRequest r;
  auto& target = std::get<iscsi::TargetSpec>(r.target);
  target.portals = {{"127.0.0.1", 3260}};
  target.iqn = "iqn.2026-11.dev.stagehand:t";
  target.lun = 1;
  r.transport = std::move(transport);
  r.runtime_dir = "/run/x";
  return r;
}

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.Add(userspace_);
    registry_.AddUnavailable("kernel", "no iscsi_tcp in this kernel");
    registry_.SetDefault("userspace");
  }

  FakeTransport userspace_;
  Registry registry_;
};

TEST_F(RegistryTest, KnowsEveryNameUsableOrNot) {
  EXPECT_THAT(registry_.Names(), ElementsAre("kernel", "userspace"));
  EXPECT_EQ(registry_.default_name(), "userspace");
}

TEST_F(RegistryTest, TheContextChoosesAKnownTransportOrNone) {
  EXPECT_EQ(registry_.Chosen({}).value_or("?"), "");
  EXPECT_EQ(registry_.Chosen({{"transport", "kernel"}}).value_or("?"), "kernel");
  EXPECT_EQ(registry_.Chosen({{"transport", "userspace"}}).value_or("?"), "userspace");
}

TEST_F(RegistryTest, AnUnknownTransportIsInvalidAndNamesTheKnownOnes) {
  const auto chosen = registry_.Chosen({{"transport", "rdma"}});

  EXPECT_THAT(chosen, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(chosen.status().message()), HasSubstr("'rdma'"));
  EXPECT_THAT(std::string(chosen.status().message()), HasSubstr("kernel, userspace"));
}

TEST_F(RegistryTest, AnUnusableTransportRefusesTheAttachWithWhy) {
  state::v1::SessionRecord prepared;
  registry_.Prepare(RequestFor("kernel"), &prepared);

  const auto attached = registry_.Attach(RequestFor("kernel"));

  EXPECT_EQ(prepared.kind_case(), state::v1::SessionRecord::KIND_NOT_SET) << "nothing to undo";
  EXPECT_THAT(attached, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(attached.status().message()), HasSubstr("no iscsi_tcp"));
  EXPECT_THAT(registry_.Detach(prepared), IsOk());
  EXPECT_EQ(userspace_.attaches(), 0);
}

TEST_F(RegistryTest, ARecordGoesBackToTheTransportThatMadeIt) {
  auto a = registry_.Attach(RequestFor(""));
  ASSERT_THAT(a, IsOk());

  EXPECT_EQ(TransportOf(a->session), "userspace");
  EXPECT_EQ(DeviceOf(a->session), a->device);
  EXPECT_TRUE(registry_.Health(a->session).Usable());
  ASSERT_THAT(registry_.Detach(a->session), IsOk());
  EXPECT_EQ(userspace_.detaches(), 1);
}

TEST_F(RegistryTest, AKernelRecordOnANodeWithoutTheKernelTransportIsDown) {
  state::v1::SessionRecord kernel;
  kernel.mutable_kernel()->set_device("/dev/sdb");

  const SessionHealth h = registry_.Health(kernel);

  EXPECT_FALSE(h.Usable());
  EXPECT_EQ(h.reason, health::Reason::kSessionDown);
  EXPECT_THAT(h.message, HasSubstr("no iscsi_tcp"));
  EXPECT_THAT(registry_.Detach(kernel), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(SessionRecordTest, AnEmptyRecordHasNoTransportAndNoDevice) {
  EXPECT_EQ(TransportOf(state::v1::SessionRecord()), "");
  EXPECT_EQ(DeviceOf(state::v1::SessionRecord()), "");
  EXPECT_EQ(UpgradeSessionRecord(state::v1::SessionRecord()).kind_case(),
            state::v1::SessionRecord::KIND_NOT_SET);
}

TEST(SessionRecordTest, FlatKernelFieldsBecomeTheKernelKind) {
  state::v1::SessionRecord flat;
  flat.set_transport("kernel");
  flat.add_paths()->set_disk("sdb");
  flat.set_multipath_map("3600");
  flat.set_device("/dev/mapper/3600");
  flat.mutable_identity()->set_serial("beaf11");

  const state::v1::SessionRecord up = UpgradeSessionRecord(flat);

  EXPECT_EQ(TransportOf(up), "kernel");
  EXPECT_EQ(up.kernel().paths(0).disk(), "sdb");
  EXPECT_EQ(up.kernel().multipath_map(), "3600");
  EXPECT_EQ(DeviceOf(up), "/dev/mapper/3600");
  EXPECT_EQ(up.kernel().identity().serial(), "beaf11");
  EXPECT_EQ(up.transport(), "");
  EXPECT_EQ(up.paths_size(), 0);
}

TEST(SessionRecordTest, ARecordWithAKindPassesUnchanged) {
  state::v1::SessionRecord record;
  record.mutable_userspace()->set_pid(7);

  EXPECT_EQ(UpgradeSessionRecord(record).SerializeAsString(), record.SerializeAsString());
}

}  // namespace
}  // namespace stagehand::transport

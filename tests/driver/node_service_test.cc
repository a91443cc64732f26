// NodeService over an in-process gRPC channel with fake transport, mounter and probe: the
// decisions (format or not, idempotency, cleanup, error codes) without root or a target.

#include "driver/node_service.h"

#include <stdlib.h>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/subprocess.h"
#include "driver/volume_store.h"
#include "tests/fakes/fake_block_probe.h"
#include "tests/fakes/fake_mounter.h"
#include "tests/fakes/fake_transport.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::driver {
namespace {

using ::stagehand::testing::FakeBlockProbe;
using ::stagehand::testing::FakeMounter;
using ::stagehand::testing::FakeTransport;
using ::testing::HasSubstr;
using Code = grpc::StatusCode;

class NodeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    NodeServiceOptions options = PlainOptions();
    options.max_volumes_per_node = 2;
    options.initiator_name = "iqn.2026-11.dev.stagehand:test";
    NodeServiceDeps deps{transport_,
                         mounter_,
                         probe_,
                         [this](const std::string& d, std::string_view fs) {
                           formatted_.push_back(d + ":" + std::string(fs));
                           return absl::OkStatus();
                         },
                         [this](const std::string& d, std::string_view) {
                           checked_.push_back(d);
                           return absl::OkStatus();
                         },
                         [this](const std::string& d, const std::string& m, std::string_view) {
                           grown_.push_back(d + " " + m);
                           return absl::OkStatus();
                         }};
    service_ = std::make_unique<NodeService>(deps, options);
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    stub_ = csi::v1::Node::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }

  void TearDown() override { server_->Shutdown(); }

  // What a second service over the same fakes needs: this node, the fixture's directories.
  NodeServiceOptions PlainOptions() const {
    NodeServiceOptions options;
    options.node_id = "node-1";
    options.state_dir = root_ + "/state";
    options.runtime_dir = root_ + "/run";
    return options;
  }

  csi::v1::NodeStageVolumeRequest StageReq(const std::string& id, const std::string& fs = "ext4",
                                           const std::string& lun = "1") {
    csi::v1::NodeStageVolumeRequest r;
    r.set_volume_id(id);
    r.set_staging_target_path(root_ + "/stage-" + id);
    r.mutable_volume_capability()->mutable_mount()->set_fs_type(fs);
    r.mutable_volume_capability()->mutable_access_mode()->set_mode(
        csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    (*r.mutable_volume_context())["targetPortal"] = "127.0.0.1:3260";
    (*r.mutable_volume_context())["iqn"] = "iqn.2026-11.dev.stagehand:t1";
    (*r.mutable_volume_context())["lun"] = lun;
    return r;
  }

  // The same request with its portal named another way (the same target and LUN).
  static csi::v1::NodeStageVolumeRequest OtherPortalName(csi::v1::NodeStageVolumeRequest r) {
    (*r.mutable_volume_context())["targetPortal"] = "localhost:3260";
    return r;
  }

  bool HasRecord(const std::string& id) const {
    auto record = VolumeStore(root_ + "/state/volumes").Load(id);
    return !record.ok() || record->has_value();
  }

  csi::v1::NodePublishVolumeRequest PublishReq(const std::string& id) {
    csi::v1::NodePublishVolumeRequest r;
    r.set_volume_id(id);
    r.set_staging_target_path(root_ + "/stage-" + id);
    r.set_target_path(root_ + "/pod-" + id);
    r.mutable_volume_capability()->mutable_mount()->set_fs_type("ext4");
    r.mutable_volume_capability()->mutable_access_mode()->set_mode(
        csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    return r;
  }

  grpc::Status Stage(const csi::v1::NodeStageVolumeRequest& r) {
    grpc::ClientContext ctx;
    csi::v1::NodeStageVolumeResponse resp;
    return stub_->NodeStageVolume(&ctx, r, &resp);
  }

  grpc::Status Unstage(const std::string& id) {
    grpc::ClientContext ctx;
    csi::v1::NodeUnstageVolumeRequest r;
    r.set_volume_id(id);
    r.set_staging_target_path(root_ + "/stage-" + id);
    csi::v1::NodeUnstageVolumeResponse resp;
    return stub_->NodeUnstageVolume(&ctx, r, &resp);
  }

  grpc::Status Publish(const csi::v1::NodePublishVolumeRequest& r) {
    grpc::ClientContext ctx;
    csi::v1::NodePublishVolumeResponse resp;
    return stub_->NodePublishVolume(&ctx, r, &resp);
  }

  grpc::Status Unpublish(const std::string& id) {
    grpc::ClientContext ctx;
    csi::v1::NodeUnpublishVolumeRequest r;
    r.set_volume_id(id);
    r.set_target_path(root_ + "/pod-" + id);
    csi::v1::NodeUnpublishVolumeResponse resp;
    return stub_->NodeUnpublishVolume(&ctx, r, &resp);
  }

  stagehand::testing::TempDir temp_;
  const std::string root_ = temp_.path();
  FakeTransport transport_;
  FakeMounter mounter_;
  FakeBlockProbe probe_;
  std::vector<std::string> formatted_;
  std::vector<std::string> checked_;
  std::vector<std::string> grown_;
  std::unique_ptr<NodeService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<csi::v1::Node::Stub> stub_;
};

TEST_F(NodeServiceTest, StagesABlankLunByFormattingAndMounting) {
  auto s = Stage(StageReq("v1"));

  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_THAT(formatted_, ::testing::ElementsAre("/dev/fake1:ext4"));
  EXPECT_TRUE(mounter_.IsMounted(root_ + "/stage-v1"));
  auto rec = VolumeStore(root_ + "/state/volumes").Load("v1");
  ASSERT_TRUE(rec.ok() && rec->has_value());
  EXPECT_EQ((*rec)->phase(), state::v1::VolumeRecord::STAGED);
  EXPECT_EQ((*rec)->session().loop_device(), "/dev/fake1");
}

TEST_F(NodeServiceTest, RepeatedStageIsANoOp) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());

  auto again = Stage(StageReq("v1"));

  EXPECT_TRUE(again.ok()) << again.error_message();
  EXPECT_EQ(transport_.attaches(), 1);
  EXPECT_EQ(formatted_.size(), 1u);
}

TEST_F(NodeServiceTest, ExistingFilesystemIsCheckedNotFormatted) {
  probe_.Set("/dev/fake1", {mounter::ProbeResult::Kind::kFilesystem, "ext4", "uuid"});

  ASSERT_TRUE(Stage(StageReq("v1")).ok());

  EXPECT_TRUE(formatted_.empty());
  EXPECT_THAT(checked_, ::testing::ElementsAre("/dev/fake1"));
}

TEST_F(NodeServiceTest, ForeignFilesystemFailsAndUndoesTheAttach) {
  probe_.Set("/dev/fake1", {mounter::ProbeResult::Kind::kFilesystem, "xfs", ""});

  auto s = Stage(StageReq("v1", "ext4"));

  EXPECT_EQ(s.error_code(), Code::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("xfs"));
  EXPECT_TRUE(formatted_.empty());
  EXPECT_EQ(transport_.attached(), 0u);
  auto rec = VolumeStore(root_ + "/state/volumes").Load("v1");
  ASSERT_TRUE(rec.ok());
  EXPECT_FALSE(rec->has_value()) << "no record may be left after a failed stage";
}

TEST_F(NodeServiceTest, ProbeErrorIsNeverTreatedAsBlank) {
  probe_.Fail(absl::UnavailableError("cannot read device"));

  auto s = Stage(StageReq("v1"));

  EXPECT_EQ(s.error_code(), Code::UNAVAILABLE);
  EXPECT_TRUE(formatted_.empty());
  EXPECT_EQ(transport_.attached(), 0u);
}

TEST_F(NodeServiceTest, TransportErrorsKeepTheirCode) {
  transport_.FailNextAttach(absl::UnauthenticatedError("CHAP rejected"));

  EXPECT_EQ(Stage(StageReq("v1")).error_code(), Code::UNAUTHENTICATED);
  transport_.FailNextAttach(absl::UnavailableError("connection refused"));
  EXPECT_EQ(Stage(StageReq("v1")).error_code(), Code::UNAVAILABLE);
}

TEST_F(NodeServiceTest, BrokenStagedVolumeIsRebuiltOnRepeatedStage) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  transport_.SetHealthy(false);  // E.g. the host rebooted: the session is gone.

  auto s = Stage(StageReq("v1"));
  transport_.SetHealthy(true);

  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(transport_.attaches(), 2);
  EXPECT_EQ(transport_.detaches(), 1);
}

TEST_F(NodeServiceTest, ARepeatedStageNeverRebuildsAStagingUnderLivePublishes) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  ASSERT_TRUE(Publish(PublishReq("v1")).ok());
  transport_.SetHealthy(false);  // The session died or is reconnecting after a target blip.

  auto s = Stage(StageReq("v1"));

  EXPECT_EQ(s.error_code(), Code::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("is published at " + root_ + "/pod-v1"));
  EXPECT_EQ(transport_.detaches(), 0) << "the session under the publish is left alone";
  EXPECT_EQ(transport_.attaches(), 1);
  EXPECT_TRUE(mounter_.IsMounted(root_ + "/stage-v1"));
  EXPECT_TRUE(mounter_.IsMounted(root_ + "/pod-v1"));
  // The record (with its publish) is kept: unpublish and a fresh stage still work.
  EXPECT_TRUE(Unpublish("v1").ok());
  EXPECT_FALSE(mounter_.IsMounted(root_ + "/pod-v1"));
  EXPECT_TRUE(Stage(StageReq("v1")).ok());
  EXPECT_EQ(transport_.attaches(), 2);
}

TEST_F(NodeServiceTest, RestageOfADifferentLunFailsClosed) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  transport_.SetHealthy(false);
  transport_.SetIdentity({{"naa.60000000000000000e00000000099999"}, "other", "IET", "X"});

  auto s = Stage(StageReq("v1"));
  auto again = Stage(StageReq("v1"));  // As the kubelet retries.

  EXPECT_EQ(s.error_code(), Code::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("identity"));
  EXPECT_EQ(again.error_code(), Code::FAILED_PRECONDITION) << "a retry must fail closed too";
  EXPECT_TRUE(formatted_.size() == 1u) << "must not format the other LUN";
  EXPECT_TRUE(checked_.empty()) << "nor check it";
  EXPECT_EQ(transport_.attached(), 0u);
  // Unstage lets go of the volume (nothing of it is left to undo).
  EXPECT_TRUE(Unstage("v1").ok());
  EXPECT_FALSE(HasRecord("v1"));
}

TEST_F(NodeServiceTest, ARestageRefusedBeforeLoginKeepsTheIdentityItStaged) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  // Another volume on the same LUN, as two volumes may have been staged before the check
  // existed (or claimed while v1's broken stage was being torn down).
  state::v1::VolumeRecord other;
  other.set_volume_id("v2");
  other.set_staging_path(root_ + "/stage-v2");
  other.set_iqn("iqn.2026-11.dev.stagehand:t1");
  other.set_lun(1);
  other.add_portals()->set_host("127.0.0.1");
  other.mutable_portals(0)->set_port(3260);
  other.set_phase(state::v1::VolumeRecord::STAGED);
  ASSERT_TRUE(VolumeStore(root_ + "/state/volumes").Save(other).ok());
  transport_.SetHealthy(false);

  auto s = Stage(StageReq("v1"));

  EXPECT_EQ(s.error_code(), Code::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("already used by volume 'v2'"));
  auto kept = VolumeStore(root_ + "/state/volumes").Load("v1");
  ASSERT_TRUE(kept.ok() && kept->has_value());
  EXPECT_EQ((*kept)->identity().designators(0), "naa.60000000000000000e00000000010001");
}

TEST_F(NodeServiceTest, AnUnreadableRecordMakesTheLunCheckFailClosed) {
  ASSERT_TRUE(MakeDirs(root_ + "/state/volumes", 0700).ok());
  ASSERT_TRUE(WriteFileAtomically(root_ + "/state/volumes/" + std::string(64, 'a') + ".json",
                                  "{not json", 0600)
                  .ok());

  auto s = Stage(StageReq("v1"));

  EXPECT_EQ(s.error_code(), Code::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("cannot tell whether another volume uses this LUN"));
  EXPECT_EQ(transport_.attaches(), 0);
}

TEST_F(NodeServiceTest, HalfDoneStageFromACrashIsCleanedUpAndRedone) {
  state::v1::VolumeRecord crashed;
  crashed.set_volume_id("v1");
  crashed.set_staging_path(root_ + "/stage-v1");
  crashed.set_phase(state::v1::VolumeRecord::STAGING);
  crashed.mutable_session()->set_loop_device("/dev/fake-old");
  ASSERT_TRUE(VolumeStore(root_ + "/state/volumes").Save(crashed).ok());

  auto s = Stage(StageReq("v1"));

  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(transport_.detaches(), 1) << "the old session is torn down first";
  EXPECT_EQ(transport_.attaches(), 1);
}

TEST_F(NodeServiceTest, PublishNeedsStageAndUnstageNeedsUnpublish) {
  EXPECT_EQ(Publish(PublishReq("v1")).error_code(), Code::NOT_FOUND);
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  ASSERT_TRUE(Publish(PublishReq("v1")).ok());

  EXPECT_EQ(Unstage("v1").error_code(), Code::FAILED_PRECONDITION);
  EXPECT_TRUE(Unpublish("v1").ok());
  EXPECT_TRUE(Unpublish("v1").ok());
  EXPECT_TRUE(Unstage("v1").ok());
  EXPECT_TRUE(Unstage("v1").ok());
  EXPECT_EQ(transport_.attached(), 0u);
  EXPECT_FALSE(mounter_.IsMounted(root_ + "/stage-v1"));
}

TEST_F(NodeServiceTest, PublishRefusesAStagedRecordWhoseVolumeIsNotLive) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  // The host rebooted: the record says STAGED, but the staging mount is gone.
  ASSERT_TRUE(mounter_.Unmount(root_ + "/stage-v1").ok());

  auto s = Publish(PublishReq("v1"));

  EXPECT_EQ(s.error_code(), Code::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("nothing is mounted at"));
  EXPECT_THAT(s.error_message(), HasSubstr("call NodeStageVolume again"));
  EXPECT_FALSE(mounter_.IsMounted(root_ + "/pod-v1")) << "an empty directory must not be bound";

  // Staged again, publishing works; a dead session is refused the same way.
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  transport_.SetHealthy(false);
  EXPECT_EQ(Publish(PublishReq("v1")).error_code(), Code::FAILED_PRECONDITION);
  transport_.SetHealthy(true);
  EXPECT_TRUE(Publish(PublishReq("v1")).ok());
  EXPECT_TRUE(mounter_.IsMounted(root_ + "/pod-v1"));
}

TEST_F(NodeServiceTest, UnknownMountIsNeverUnmounted) {
  ASSERT_TRUE(mounter_.Mount({"/dev/sdz", root_ + "/stage-v9", "ext4", {}}).ok());

  EXPECT_EQ(Unstage("v9").error_code(), Code::FAILED_PRECONDITION);
  EXPECT_TRUE(mounter_.IsMounted(root_ + "/stage-v9"));
}

TEST_F(NodeServiceTest, MaxVolumesPerNodeIsEnforced) {
  ASSERT_TRUE(Stage(StageReq("v1", "ext4", "1")).ok());
  ASSERT_TRUE(Stage(StageReq("v2", "ext4", "2")).ok());

  EXPECT_EQ(Stage(StageReq("v3", "ext4", "3")).error_code(), Code::RESOURCE_EXHAUSTED);
}

TEST_F(NodeServiceTest, SecondVolumeOnTheSameLunIsRefusedBeforeAnyAttach) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());

  auto s = Stage(StageReq("v2"));

  EXPECT_EQ(s.error_code(), Code::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("already used by volume 'v1'"));
  EXPECT_EQ(transport_.attaches(), 1);
  EXPECT_FALSE(mounter_.IsMounted(root_ + "/stage-v2"));
  EXPECT_TRUE(mounter_.IsMounted(root_ + "/stage-v1"));
  EXPECT_FALSE(HasRecord("v2")) << "a refused stage leaves no record";
  // Unstaging the first one frees the LUN for another volume.
  ASSERT_TRUE(Unstage("v1").ok());
  EXPECT_TRUE(Stage(StageReq("v2")).ok());
}

TEST_F(NodeServiceTest, TheIdentityIsPersistedBeforeTheLunIsExposed) {
  std::optional<state::v1::VolumeRecord> mid_attach;
  transport_.SetAfterVet([&] {
    auto r = VolumeStore(root_ + "/state/volumes").Load("v1");
    ASSERT_TRUE(r.ok());
    mid_attach = *r;
  });

  ASSERT_TRUE(Stage(StageReq("v1")).ok());

  ASSERT_TRUE(mid_attach.has_value());
  EXPECT_EQ(mid_attach->phase(), state::v1::VolumeRecord::STAGING);
  EXPECT_EQ(mid_attach->identity().designators(0), "naa.60000000000000000e00000000010001");
  EXPECT_EQ(mid_attach->session().identity().designators(0), "naa.60000000000000000e00000000010001")
      << "a teardown after a crash here checks the disk against it";
}

TEST_F(NodeServiceTest, SameLunBehindAnotherPortalNameIsRefusedAfterReadingItsIdentity) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  const auto alias = OtherPortalName(StageReq("v2"));

  auto s = Stage(alias);

  EXPECT_EQ(s.error_code(), Code::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("already used by volume 'v1'"));
  EXPECT_THAT(s.error_message(), HasSubstr("naa.60000000000000000e00000000010001"));
  EXPECT_EQ(formatted_.size(), 1u) << "only v1's blank LUN was formatted";
  EXPECT_TRUE(checked_.empty()) << "the filesystem is not even checked twice";
  EXPECT_EQ(transport_.detaches(), 0)
      << "the attach undoes its own work; a detach of v2's record could take v1's device";
  EXPECT_EQ(transport_.attached(), 1u) << "v1's stays";
  EXPECT_TRUE(mounter_.IsMounted(root_ + "/stage-v1"));
  EXPECT_FALSE(HasRecord("v2"));
}

TEST_F(NodeServiceTest, ExpandPicksUpTheNewSizeAndGrowsTheFilesystem) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  transport_.SetCapacity(4u << 20);
  csi::v1::NodeExpandVolumeRequest req;
  req.set_volume_id("v1");
  req.set_volume_path(root_ + "/stage-v1");
  req.mutable_capacity_range()->set_required_bytes(4 << 20);

  grpc::ClientContext ctx;
  csi::v1::NodeExpandVolumeResponse resp;
  auto s = stub_->NodeExpandVolume(&ctx, req, &resp);

  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.capacity_bytes(), 4 << 20);
  EXPECT_THAT(grown_, ::testing::ElementsAre("/dev/fake1 " + root_ + "/stage-v1"));
}

TEST_F(NodeServiceTest, ExpandBeyondTheLunIsOutOfRange) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  csi::v1::NodeExpandVolumeRequest req;
  req.set_volume_id("v1");
  req.set_volume_path(root_ + "/stage-v1");
  req.mutable_capacity_range()->set_required_bytes(1ll << 40);

  grpc::ClientContext ctx;
  csi::v1::NodeExpandVolumeResponse resp;
  auto s = stub_->NodeExpandVolume(&ctx, req, &resp);

  EXPECT_EQ(s.error_code(), Code::OUT_OF_RANGE);
  EXPECT_TRUE(grown_.empty());
  req.set_volume_id("unknown");
  grpc::ClientContext ctx2;
  EXPECT_EQ(stub_->NodeExpandVolume(&ctx2, req, &resp).error_code(), Code::NOT_FOUND);
}

// The CSI spec's order, which csi-sanity checks: a missing field is INVALID_ARGUMENT, then an
// unknown volume is NOT_FOUND whatever its paths look like, then a malformed value is
// INVALID_ARGUMENT.
TEST_F(NodeServiceTest, PublishOfAnUnknownVolumeIsNotFoundBeforeItsPathsAreChecked) {
  auto relative = PublishReq("v1");
  relative.set_target_path("some/path");
  auto no_target = PublishReq("v1");
  no_target.clear_target_path();
  auto no_capability = PublishReq("v1");
  no_capability.clear_volume_capability();
  auto no_staging = PublishReq("v1");
  no_staging.clear_staging_target_path();

  EXPECT_EQ(Publish(relative).error_code(), Code::NOT_FOUND);
  EXPECT_EQ(Publish(no_target).error_code(), Code::INVALID_ARGUMENT);
  EXPECT_EQ(Publish(no_capability).error_code(), Code::INVALID_ARGUMENT);
  EXPECT_EQ(Publish(no_staging).error_code(), Code::FAILED_PRECONDITION);
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  EXPECT_EQ(Publish(relative).error_code(), Code::INVALID_ARGUMENT);
  EXPECT_FALSE(mounter_.IsMounted(root_ + "/pod-v1"));
}

TEST_F(NodeServiceTest, UnpublishOfAVolumeWithoutRecordRemovesNothing) {
  const std::string target = root_ + "/pod-v1";
  ASSERT_TRUE(WriteFileAtomically(target, "someone's data", 0644).ok());
  csi::v1::NodeUnpublishVolumeRequest relative;
  relative.set_volume_id("v1");
  relative.set_target_path("some/path");
  csi::v1::NodeUnpublishVolumeRequest no_target;
  no_target.set_volume_id("v1");

  EXPECT_TRUE(Unpublish("v1").ok());
  grpc::ClientContext c1;
  csi::v1::NodeUnpublishVolumeResponse resp;
  EXPECT_TRUE(stub_->NodeUnpublishVolume(&c1, relative, &resp).ok());
  grpc::ClientContext c2;
  EXPECT_EQ(stub_->NodeUnpublishVolume(&c2, no_target, &resp).error_code(), Code::INVALID_ARGUMENT);

  auto text = ReadFileToString(target);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "someone's data");
}

TEST_F(NodeServiceTest, UnstageOfAnUnknownVolumeIsDoneWhateverItsPathLooksLike) {
  csi::v1::NodeUnstageVolumeRequest relative;
  relative.set_volume_id("v1");
  relative.set_staging_target_path("some/path");
  csi::v1::NodeUnstageVolumeRequest no_path;
  no_path.set_volume_id("v1");
  csi::v1::NodeUnstageVolumeResponse resp;

  grpc::ClientContext c1;
  EXPECT_TRUE(stub_->NodeUnstageVolume(&c1, relative, &resp).ok());
  grpc::ClientContext c2;
  EXPECT_EQ(stub_->NodeUnstageVolume(&c2, no_path, &resp).error_code(), Code::INVALID_ARGUMENT);
}

TEST_F(NodeServiceTest, StatsOfAnUnknownVolumeOrPathIsNotFound) {
  auto stats = [this](const std::string& id, const std::string& path) {
    csi::v1::NodeGetVolumeStatsRequest req;
    req.set_volume_id(id);
    req.set_volume_path(path);
    grpc::ClientContext ctx;
    csi::v1::NodeGetVolumeStatsResponse resp;
    return stub_->NodeGetVolumeStats(&ctx, req, &resp).error_code();
  };

  EXPECT_EQ(stats("v1", "some/path"), Code::NOT_FOUND);
  EXPECT_EQ(stats("", "some/path"), Code::INVALID_ARGUMENT);
  EXPECT_EQ(stats("v1", ""), Code::INVALID_ARGUMENT);
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  EXPECT_EQ(stats("v1", "some/path"), Code::NOT_FOUND);
  EXPECT_EQ(stats("v1", root_ + "/elsewhere"), Code::NOT_FOUND);
}

TEST_F(NodeServiceTest, ExpandOfAnUnknownVolumeOrPathIsNotFound) {
  auto expand = [this](const std::string& id, const std::string& path) {
    csi::v1::NodeExpandVolumeRequest req;
    req.set_volume_id(id);
    req.set_volume_path(path);
    grpc::ClientContext ctx;
    csi::v1::NodeExpandVolumeResponse resp;
    return stub_->NodeExpandVolume(&ctx, req, &resp).error_code();
  };

  EXPECT_EQ(expand("v1", "some/path"), Code::NOT_FOUND);
  EXPECT_EQ(expand("", "some/path"), Code::INVALID_ARGUMENT);
  EXPECT_EQ(expand("v1", ""), Code::INVALID_ARGUMENT);
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  EXPECT_EQ(expand("v1", "some/path"), Code::NOT_FOUND);
  EXPECT_TRUE(grown_.empty());
}

TEST_F(NodeServiceTest, SingleNodeSingleWriterIsPublishedAtOneTargetOnly) {
  auto stage = StageReq("v1");
  stage.mutable_volume_capability()->mutable_access_mode()->set_mode(
      csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_SINGLE_WRITER);
  auto publish = PublishReq("v1");
  *publish.mutable_volume_capability() = stage.volume_capability();
  auto other = publish;
  other.set_target_path(root_ + "/other-pod");
  ASSERT_TRUE(Stage(stage).ok());
  ASSERT_TRUE(Publish(publish).ok());

  EXPECT_EQ(Publish(other).error_code(), Code::FAILED_PRECONDITION);
  EXPECT_TRUE(Publish(publish).ok()) << "a repeat at the same target is idempotent";
  EXPECT_FALSE(mounter_.IsMounted(root_ + "/other-pod"));
}

TEST_F(NodeServiceTest, PublishNeverHidesWhatIsAtTheTarget) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  ASSERT_TRUE(MakeDirs(root_ + "/pod-v1", 0755).ok());
  ASSERT_TRUE(WriteFileAtomically(root_ + "/pod-v1/data", "theirs", 0644).ok());

  auto s = Publish(PublishReq("v1"));

  EXPECT_EQ(s.error_code(), Code::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("not empty"));
  EXPECT_FALSE(mounter_.IsMounted(root_ + "/pod-v1"));
  EXPECT_EQ(ReadFileToString(root_ + "/pod-v1/data").value_or(""), "theirs");
}

TEST_F(NodeServiceTest, BlockPublishNeverHidesOrDeletesAFileWithData) {
  auto stage = StageReq("v1");
  stage.mutable_volume_capability()->mutable_block();
  ASSERT_TRUE(Stage(stage).ok());
  auto publish = PublishReq("v1");
  publish.mutable_volume_capability()->mutable_block();
  ASSERT_TRUE(WriteFileAtomically(root_ + "/pod-v1", "theirs", 0644).ok());

  EXPECT_EQ(Publish(publish).error_code(), Code::FAILED_PRECONDITION);
  EXPECT_TRUE(Unpublish("v1").ok());
  EXPECT_EQ(ReadFileToString(root_ + "/pod-v1").value_or(""), "theirs");
}

TEST_F(NodeServiceTest, UnpublishLeavesADirectoryThatIsNoLongerEmptyAndDoesNotWedge) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  ASSERT_TRUE(Publish(PublishReq("v1")).ok());
  // Written into the directory itself (not the volume), e.g. by a process after the unmount.
  ASSERT_TRUE(WriteFileAtomically(root_ + "/pod-v1/stray", "x", 0644).ok());

  EXPECT_TRUE(Unpublish("v1").ok());
  EXPECT_EQ(ReadFileToString(root_ + "/pod-v1/stray").value_or(""), "x");
  EXPECT_TRUE(Unstage("v1").ok()) << "the publish record is gone: unstage is not blocked";
}

TEST_F(NodeServiceTest, TargetsInsideOrAroundAnotherVolumesPathsAreRefused) {
  ASSERT_TRUE(Stage(StageReq("v1", "ext4", "1")).ok());
  ASSERT_TRUE(Stage(StageReq("v2", "ext4", "2")).ok());
  ASSERT_TRUE(Publish(PublishReq("v1")).ok());
  auto inside_staging = PublishReq("v2");
  inside_staging.set_target_path(root_ + "/stage-v1/x");
  auto on_publish = PublishReq("v2");
  on_publish.set_target_path(root_ + "/pod-v1");
  auto inside_publish = PublishReq("v2");
  inside_publish.set_target_path(root_ + "/pod-v1/sub");

  EXPECT_EQ(Publish(inside_staging).error_code(), Code::INVALID_ARGUMENT);
  EXPECT_EQ(Publish(on_publish).error_code(), Code::INVALID_ARGUMENT);
  EXPECT_EQ(Publish(inside_publish).error_code(), Code::INVALID_ARGUMENT);
  EXPECT_TRUE(Publish(PublishReq("v1")).ok()) << "a repeat of a publish is not an overlap";
  EXPECT_TRUE(Publish(PublishReq("v2")).ok());
}

// mkfs killed half-way leaves data without a signature, which is never formatted: only a stage
// of the volume that started that format, on the same LUN, may finish it.
TEST_F(NodeServiceTest, OnlyTheVolumeThatStartedAFormatOnThisLunMayFinishIt) {
  const mounter::ProbeResult half_made{mounter::ProbeResult::Kind::kNotZeroed, "", ""};
  bool kill_mkfs = true;
  NodeService service(
      {transport_, mounter_, probe_,
       [&](const std::string& d, std::string_view fs) {
         if (std::exchange(kill_mkfs, false)) {
           return absl::UnavailableError("mkfs.ext4 killed by signal 9");
         }
         formatted_.push_back(d + ":" + std::string(fs));
         return absl::OkStatus();
       },
       [](const std::string&, std::string_view) { return absl::OkStatus(); }, nullptr},
      PlainOptions());
  ASSERT_EQ(service.Stage(StageReq("v1")).code(), absl::StatusCode::kUnavailable);
  for (int n = 1; n <= 5; ++n) {  // Every device the stages below attach.
    probe_.Set("/dev/fake" + std::to_string(n), half_made);
  }

  // Another volume on that LUN (v1 holds no record now) is refused; so is v1 on another LUN.
  const absl::Status other_volume = service.Stage(StageReq("v2"));
  transport_.SetIdentity({{"naa.60000000000000000e00000000099999"}, "other", "IET", "X"});
  const absl::Status other_lun = service.Stage(StageReq("v1"));
  transport_.SetIdentity({{"naa.60000000000000000e00000000010001"}, "beaf11", "IET", "X"});
  const absl::Status finished = service.Stage(StageReq("v1"));

  EXPECT_EQ(other_volume.code(), absl::StatusCode::kFailedPrecondition) << other_volume;
  EXPECT_EQ(other_lun.code(), absl::StatusCode::kFailedPrecondition) << other_lun;
  EXPECT_TRUE(finished.ok()) << finished;
  EXPECT_EQ(formatted_.size(), 1u);
  // Once finished, the record of the format is gone: data without a signature is refused again.
  ASSERT_TRUE(service
                  .Unstage([&] {
                    csi::v1::NodeUnstageVolumeRequest r;
                    r.set_volume_id("v1");
                    r.set_staging_target_path(root_ + "/stage-v1");
                    return r;
                  }())
                  .ok());
  EXPECT_EQ(service.Stage(StageReq("v1")).code(), absl::StatusCode::kFailedPrecondition);
}

// A re-stage that fails (the target is down) keeps the identity it staged: the retry must still
// find that very LUN, not whatever the LUN number names by then.
TEST_F(NodeServiceTest, AFailedRestageKeepsTheIdentityItStaged) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  transport_.SetHealthy(false);
  transport_.FailNextAttach(absl::UnavailableError("portal unreachable"));

  EXPECT_EQ(Stage(StageReq("v1")).error_code(), Code::UNAVAILABLE);
  auto record = VolumeStore(root_ + "/state/volumes").Load("v1");
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_FALSE((*record)->identity().designators().empty());
  transport_.SetIdentity({{"naa.60000000000000000e00000000099999"}, "other", "IET", "X"});
  EXPECT_EQ(Stage(StageReq("v1")).error_code(), Code::FAILED_PRECONDITION);
}

TEST_F(NodeServiceTest, AnUnstageDropsTheRecordOfAnUnfinishedFormat) {
  bool kill_mkfs = true;
  NodeService service(
      {transport_, mounter_, probe_,
       [&](const std::string&, std::string_view) {
         return std::exchange(kill_mkfs, false)
                    ? absl::UnavailableError("mkfs.ext4 killed by signal 9")
                    : absl::OkStatus();
       },
       [](const std::string&, std::string_view) { return absl::OkStatus(); }, nullptr},
      PlainOptions());
  ASSERT_EQ(service.Stage(StageReq("v1")).code(), absl::StatusCode::kUnavailable);
  for (int n = 1; n <= 2; ++n) {
    probe_.Set("/dev/fake" + std::to_string(n),
               mounter::ProbeResult{mounter::ProbeResult::Kind::kNotZeroed, "", ""});
  }
  csi::v1::NodeUnstageVolumeRequest unstage;
  unstage.set_volume_id("v1");
  unstage.set_staging_target_path(root_ + "/stage-v1");

  ASSERT_TRUE(service.Unstage(unstage).ok());

  EXPECT_EQ(service.Stage(StageReq("v1")).code(), absl::StatusCode::kFailedPrecondition)
      << "unstaged on purpose: what is on the LUN now is never formatted";
}

TEST_F(NodeServiceTest, CapabilitiesAndInfo) {
  grpc::ClientContext c1;
  csi::v1::NodeGetCapabilitiesResponse caps;
  ASSERT_TRUE(stub_->NodeGetCapabilities(&c1, {}, &caps).ok());
  grpc::ClientContext c2;
  csi::v1::NodeGetInfoResponse info;
  ASSERT_TRUE(stub_->NodeGetInfo(&c2, {}, &info).ok());

  std::vector<csi::v1::NodeServiceCapability::RPC::Type> types;
  for (const auto& c : caps.capabilities()) {
    types.push_back(c.rpc().type());
  }
  using Rpc = csi::v1::NodeServiceCapability::RPC;
  EXPECT_THAT(types, ::testing::UnorderedElementsAre(
                         Rpc::STAGE_UNSTAGE_VOLUME, Rpc::GET_VOLUME_STATS, Rpc::VOLUME_CONDITION,
                         Rpc::SINGLE_NODE_MULTI_WRITER, Rpc::EXPAND_VOLUME));
  EXPECT_EQ(info.node_id(), "node-1");
  EXPECT_EQ(info.max_volumes_per_node(), 2);
}

}  // namespace
}  // namespace stagehand::driver

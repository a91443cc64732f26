// NodeService over an in-process gRPC channel with fake transport, mounter and probe: the
// decisions (format or not, idempotency, cleanup, error codes) without root or a target.

#include "tests/driver/node_service_fixture.h"

namespace stagehand::driver {
namespace {

using ::testing::HasSubstr;
using Code = grpc::StatusCode;

TEST_F(NodeServiceTest, StagesABlankLunByFormattingAndMounting) {
  auto s = Stage(StageReq("v1"));

  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_THAT(formatted_, ::testing::ElementsAre("/dev/fake1:ext4"));
  EXPECT_TRUE(mounter_.IsMounted(root_ + "/stage-v1"));
  auto rec = VolumeStore(root_ + "/state/volumes").Load("v1");
  ASSERT_TRUE(rec.ok() && rec->has_value());
  EXPECT_EQ((*rec)->phase, StagedVolume::Phase::kStaged);
  EXPECT_EQ((*rec)->Device(), "/dev/fake1");
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
  StagedVolume other;
  other.volume_id = "v2";
  other.staging_path = root_ + "/stage-v2";
  other.iqn = "iqn.2026-11.dev.stagehand:t1";
  other.lun = 1;
  other.portals = {{"127.0.0.1", 3260}};
  other.phase = StagedVolume::Phase::kStaged;
  ASSERT_TRUE(VolumeStore(root_ + "/state/volumes").Save(other).ok());
  transport_.SetHealthy(false);

  auto s = Stage(StageReq("v1"));

  EXPECT_EQ(s.error_code(), Code::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("already used by volume 'v2'"));
  auto kept = VolumeStore(root_ + "/state/volumes").Load("v1");
  ASSERT_TRUE(kept.ok() && kept->has_value());
  EXPECT_EQ((*kept)->identity.designators.at(0), "naa.60000000000000000e00000000010001");
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

TEST_F(NodeServiceTest, ARecordLackingItsStagingPathIsDataLossAndUndoesNothing) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  ASSERT_TRUE(WriteFileAtomically(VolumeStore(root_ + "/state/volumes").PathFor("v1"),
                                  R"({"volume_id":"v1"})", 0600)
                  .ok());

  auto s = Unstage("v1");

  EXPECT_EQ(s.error_code(), Code::DATA_LOSS) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("lacks phase, staging_path"));
  EXPECT_TRUE(mounter_.IsMounted(root_ + "/stage-v1")) << "nothing is undone on a guess";
  EXPECT_EQ(transport_.detaches(), 0);
}

TEST_F(NodeServiceTest, HalfDoneStageFromACrashIsCleanedUpAndRedone) {
  StagedVolume crashed;
  crashed.volume_id = "v1";
  crashed.staging_path = root_ + "/stage-v1";
  crashed.phase = StagedVolume::Phase::kStaging;
  crashed.session.set_loop_device("/dev/fake-old");
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
  std::optional<StagedVolume> mid_attach;
  transport_.SetAfterVet([&] {
    auto r = VolumeStore(root_ + "/state/volumes").Load("v1");
    ASSERT_TRUE(r.ok());
    mid_attach = *r;
  });

  ASSERT_TRUE(Stage(StageReq("v1")).ok());

  ASSERT_TRUE(mid_attach.has_value());
  EXPECT_EQ(mid_attach->phase, StagedVolume::Phase::kStaging);
  EXPECT_EQ(mid_attach->identity.designators.at(0), "naa.60000000000000000e00000000010001");
  EXPECT_EQ(mid_attach->session.userspace().pid(), 1001)
      << "the session as the transport had it then: a teardown after a crash here undoes it";
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

// The kubelet with a CSIDriver's seLinuxMount: the pod's context in both the stage and the
// publish flags; the staging mount takes it, and one filesystem has one context.
TEST_F(NodeServiceTest, AnSelinuxContextIsMountedAtStageAndMustMatchAtPublish) {
  const std::string context = R"(context="system_u:object_r:container_file_t:s0:c15,c25")";
  auto stage = StageReq("v1");
  stage.mutable_volume_capability()->mutable_mount()->add_mount_flags(context);
  ASSERT_TRUE(Stage(stage).ok());
  auto staged = mounter_.Find(root_ + "/stage-v1");
  ASSERT_TRUE(staged.ok() && staged->has_value());
  EXPECT_THAT((*staged)->options, ::testing::HasSubstr(context));

  auto other = PublishReq("v1");
  other.mutable_volume_capability()->mutable_mount()->add_mount_flags(
      R"(context="system_u:object_r:container_file_t:s0:c1,c2")");
  auto s = Publish(other);
  EXPECT_EQ(s.error_code(), Code::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("staged with SELinux context "
                                                      "'system_u:object_r:container_file_t:s0:"
                                                      "c15,c25'"));
  EXPECT_EQ(Publish(PublishReq("v1")).error_code(), Code::FAILED_PRECONDITION)
      << "a publish without the context would need a relabel of a context= mount";
  EXPECT_FALSE(mounter_.IsMounted(root_ + "/pod-v1"));

  auto same = PublishReq("v1");
  same.mutable_volume_capability()->mutable_mount()->add_mount_flags(context);
  EXPECT_TRUE(Publish(same).ok());
  EXPECT_TRUE(mounter_.IsMounted(root_ + "/pod-v1"));
}

// The kubelet (RecoverVolumeExpansionFailure) gives up on INVALID_ARGUMENT, OUT_OF_RANGE and
// NOT_FOUND and retries every other code.
TEST_F(NodeServiceTest, ExpandCodesTellTheKubeletWhatToRetry) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  auto expand = [&](int64_t required, int64_t limit, const std::string& id = "v1") {
    csi::v1::NodeExpandVolumeRequest req;
    req.set_volume_id(id);
    req.set_volume_path(root_ + "/stage-v1");
    req.mutable_capacity_range()->set_required_bytes(required);
    req.mutable_capacity_range()->set_limit_bytes(limit);
    grpc::ClientContext ctx;
    csi::v1::NodeExpandVolumeResponse resp;
    return stub_->NodeExpandVolume(&ctx, req, &resp);
  };

  // The target has not grown the LUN (yet): retried.
  EXPECT_EQ(expand(1ll << 40, 0).error_code(), Code::FAILED_PRECONDITION);
  // Infeasible: the LUN (1 MiB) is already larger than the limit, a range that cannot be met,
  // a volume that is not here.
  EXPECT_EQ(expand(0, 4096).error_code(), Code::OUT_OF_RANGE);
  EXPECT_EQ(expand(8192, 4096).error_code(), Code::INVALID_ARGUMENT);
  EXPECT_EQ(expand(4096, 0, "unknown").error_code(), Code::NOT_FOUND);
  // A refresh that fails with an errno absl calls NOT_FOUND (a session's status file gone):
  // the request is fine, the kubelet must retry.
  transport_.FailNextRefresh(absl::NotFoundError("open status: No such file or directory"));
  EXPECT_EQ(expand(4096, 0).error_code(), Code::UNAVAILABLE);
  EXPECT_TRUE(grown_.empty());
}

TEST_F(NodeServiceTest, ExpandRefusesAnotherAccessTypeThanTheStagedOne) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  csi::v1::NodeExpandVolumeRequest req;
  req.set_volume_id("v1");
  req.set_volume_path(root_ + "/stage-v1");
  req.mutable_volume_capability()->mutable_block();
  req.mutable_volume_capability()->mutable_access_mode()->set_mode(
      csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  grpc::ClientContext ctx;
  csi::v1::NodeExpandVolumeResponse resp;
  auto s = stub_->NodeExpandVolume(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), Code::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("staged as mount"));
  EXPECT_TRUE(grown_.empty());
}

// The CSI spec's order, which csi-sanity checks: a missing field is INVALID_ARGUMENT, then an
// unknown volume is NOT_FOUND whatever its paths look like, then a malformed value is
// INVALID_ARGUMENT.
// An XFS clone beside its source: the kernel refuses the duplicate UUID, the stage mounts it
// with nouuid (never changing the UUID on disk) and the record says so.
TEST_F(NodeServiceTest, AnXfsWhoseUuidIsMountedAlreadyIsMountedWithNouuid) {
  probe_.Set("/dev/fake1", {mounter::ProbeResult::Kind::kFilesystem, "xfs", "uuid-1"});
  mounter_.FailNext(absl::InvalidArgumentError(
      "mount '/dev/fake1' on '/s': Invalid argument; the kernel says: XFS (fake1): Filesystem "
      "has duplicate UUID uuid-1 - can't mount"));

  ASSERT_TRUE(Stage(StageReq("v1", "xfs")).ok());

  auto mounted = mounter_.Find(root_ + "/stage-v1");
  ASSERT_TRUE(mounted.ok() && mounted->has_value());
  EXPECT_THAT((*mounted)->options, ::testing::HasSubstr("nouuid"));
  EXPECT_TRUE(formatted_.empty());
  auto record = VolumeStore(root_ + "/state/volumes").Load("v1");
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_TRUE((*record)->xfs_nouuid);
}

// Any other failed mount of an XFS is not retried: its error (with the kernel's reason) stands.
TEST_F(NodeServiceTest, AnotherXfsMountFailureIsNotRetriedWithNouuid) {
  probe_.Set("/dev/fake1", {mounter::ProbeResult::Kind::kFilesystem, "xfs", "uuid-1"});
  mounter_.FailNext(absl::InvalidArgumentError(
      "mount: Invalid argument; the kernel says: XFS (fake1): bad superblock"));

  const grpc::Status s = Stage(StageReq("v1", "xfs"));

  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), ::testing::HasSubstr("the kernel says: XFS (fake1)"));
  EXPECT_FALSE(mounter_.IsMounted(root_ + "/stage-v1"));
}

}  // namespace
}  // namespace stagehand::driver

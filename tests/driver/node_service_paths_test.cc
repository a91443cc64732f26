// NodeService with fakes: requests for unknown volumes and paths, what publish may and may not do
// at a target, format ownership across volumes, capabilities.

#include "tests/driver/node_service_fixture.h"

namespace stagehand::driver {
namespace {

using ::testing::HasSubstr;
using Code = grpc::StatusCode;

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

TEST_F(NodeServiceTest, AStagingUnmountedBehindOurBackIsAbnormalWithoutUsage) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  csi::v1::NodeGetVolumeStatsRequest req;
  req.set_volume_id("v1");
  req.set_volume_path(root_ + "/stage-v1");
  csi::v1::NodeGetVolumeStatsResponse resp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->NodeGetVolumeStats(&ctx, req, &resp).ok());
  }
  ASSERT_FALSE(resp.volume_condition().abnormal()) << resp.volume_condition().message();
  ASSERT_EQ(resp.usage_size(), 2);

  ASSERT_TRUE(mounter_.Unmount(root_ + "/stage-v1").ok());
  resp.Clear();
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->NodeGetVolumeStats(&ctx, req, &resp).ok());

  EXPECT_TRUE(resp.volume_condition().abnormal());
  EXPECT_THAT(resp.volume_condition().message(), HasSubstr("nothing is mounted"));
  EXPECT_EQ(resp.usage_size(), 0) << "the usage of the directory's filesystem would be a lie";
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
      {transport_.AsRegistry(), mounter_, probe_,
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
  EXPECT_FALSE((*record)->identity.Empty());
  transport_.SetIdentity({{"naa.60000000000000000e00000000099999"}, "other", "IET", "X"});
  EXPECT_EQ(Stage(StageReq("v1")).error_code(), Code::FAILED_PRECONDITION);
}

TEST_F(NodeServiceTest, AnUnstageDropsTheRecordOfAnUnfinishedFormat) {
  bool kill_mkfs = true;
  NodeService service(
      {transport_.AsRegistry(), mounter_, probe_,
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
                         Rpc::SINGLE_NODE_MULTI_WRITER, Rpc::EXPAND_VOLUME, Rpc::GET_VOLUME_HEALTH,
                         Rpc::GET_STORAGE_HEALTH));
  EXPECT_EQ(info.node_id(), "node-1");
  EXPECT_EQ(info.max_volumes_per_node(), 2);
}

}  // namespace
}  // namespace stagehand::driver

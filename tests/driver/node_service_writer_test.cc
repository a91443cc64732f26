// MULTI_NODE_SINGLE_WRITER: staged as a reader, its writer chosen at the first read-write
// publish and given up at the last read-write unpublish (the transport's SetWriter).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "iscsi/persistent_reservation.h"
#include "iscsi/reservation_claim.h"
#include "tests/driver/node_service_fixture.h"

namespace stagehand::driver {
namespace {

using ::testing::HasSubstr;
using Code = grpc::StatusCode;
using Mode = csi::v1::VolumeCapability::AccessMode;

class SingleWriterTest : public NodeServiceTest {
 protected:
  csi::v1::NodeStageVolumeRequest BlockStage(const std::string& id, Mode::Mode mode) {
    auto r = StageReq(id);
    r.mutable_volume_capability()->mutable_block();
    r.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);
    return r;
  }

  csi::v1::NodePublishVolumeRequest BlockPublish(const std::string& id, const std::string& target,
                                                 bool readonly, Mode::Mode mode) {
    auto r = PublishReq(id);
    r.set_target_path(root_ + "/" + target);
    r.mutable_volume_capability()->mutable_block();
    r.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);
    r.set_readonly(readonly);
    return r;
  }

  grpc::Status UnpublishAt(const std::string& id, const std::string& target) {
    grpc::ClientContext ctx;
    csi::v1::NodeUnpublishVolumeRequest r;
    r.set_volume_id(id);
    r.set_target_path(root_ + "/" + target);
    csi::v1::NodeUnpublishVolumeResponse resp;
    return stub_->NodeUnpublishVolume(&ctx, r, &resp);
  }

  const uint64_t node_key_ = iscsi::NodeKey("node-1", 0);
};

TEST_F(SingleWriterTest, TheStageReadsOnlyAndTheFirstReadWritePublishClaims) {
  const auto mode = Mode::MULTI_NODE_SINGLE_WRITER;
  ASSERT_TRUE(Stage(BlockStage("v1", mode)).ok());
  EXPECT_EQ(transport_.last_attach_key(), 0u) << "a reader registers nothing";

  ASSERT_TRUE(Publish(BlockPublish("v1", "ro", /*readonly=*/true, mode)).ok());
  EXPECT_EQ(transport_.WriterKey("/dev/fake1"), 0u) << "a read-only publish claims nothing";
  EXPECT_EQ(transport_.writer_changes(), 0);

  ASSERT_TRUE(Publish(BlockPublish("v1", "rw", /*readonly=*/false, mode)).ok());
  EXPECT_EQ(transport_.WriterKey("/dev/fake1"), node_key_);
  ASSERT_TRUE(Publish(BlockPublish("v1", "rw2", /*readonly=*/false, mode)).ok());
  EXPECT_EQ(transport_.WriterKey("/dev/fake1"), node_key_);

  // The record keeps what the transport changed (a new session process serves it).
  auto record = VolumeStore(root_ + "/state/volumes").Load("v1");
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->session.userspace().generation(), 1u);

  ASSERT_TRUE(UnpublishAt("v1", "ro").ok());
  ASSERT_TRUE(UnpublishAt("v1", "rw").ok());
  EXPECT_EQ(transport_.WriterKey("/dev/fake1"), node_key_) << "another read-write publish stays";
  ASSERT_TRUE(UnpublishAt("v1", "rw2").ok());
  EXPECT_EQ(transport_.WriterKey("/dev/fake1"), 0u) << "the last read-write unpublish gives up";
  EXPECT_TRUE(Unstage("v1").ok());
}

TEST_F(SingleWriterTest, APublishRefusedByAnotherWriterIsRetryableAndLeavesNothing) {
  const auto mode = Mode::MULTI_NODE_SINGLE_WRITER;
  ASSERT_TRUE(Stage(BlockStage("v1", mode)).ok());
  absl::Status busy = absl::UnavailableError("the volume is in use on another node");
  iscsi::SetHolderKey(busy, 0x1234567800000001);
  transport_.FailNextWriterChange(busy);

  const grpc::Status refused = Publish(BlockPublish("v1", "rw", /*readonly=*/false, mode));

  EXPECT_EQ(refused.error_code(), Code::UNAVAILABLE);
  EXPECT_THAT(refused.error_message(), HasSubstr("written on another node"));
  EXPECT_THAT(refused.error_message(), HasSubstr(iscsi::FormatKey(0x1234567800000001)));
  EXPECT_FALSE(mounter_.IsMounted(root_ + "/rw"));
  auto record = VolumeStore(root_ + "/state/volumes").Load("v1");
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_TRUE((*record)->publications.empty()) << "a refused publish records nothing";

  EXPECT_TRUE(Publish(BlockPublish("v1", "ro", /*readonly=*/true, mode)).ok())
      << "it may still be read here";
  EXPECT_TRUE(Publish(BlockPublish("v1", "rw", /*readonly=*/false, mode)).ok())
      << "once the other writer let go";
  EXPECT_EQ(transport_.WriterKey("/dev/fake1"), node_key_);
}

TEST_F(SingleWriterTest, AnUnpublishWhoseReleaseFailsIsRetriedAndGivesUpThen) {
  const auto mode = Mode::MULTI_NODE_SINGLE_WRITER;
  ASSERT_TRUE(Stage(BlockStage("v1", mode)).ok());
  ASSERT_TRUE(Publish(BlockPublish("v1", "rw", /*readonly=*/false, mode)).ok());
  transport_.FailNextWriterChange(absl::InternalError("session process exited"));

  EXPECT_EQ(UnpublishAt("v1", "rw").error_code(), Code::INTERNAL);
  EXPECT_EQ(transport_.WriterKey("/dev/fake1"), node_key_);
  EXPECT_TRUE(UnpublishAt("v1", "rw").ok());
  EXPECT_EQ(transport_.WriterKey("/dev/fake1"), 0u);
}

// The claim is made with the publish on record: a bind that fails after it leaves a publish
// whose unpublish gives the LUN up again.
TEST_F(SingleWriterTest, APublishThatFailsAfterItsClaimIsUndoneByItsUnpublish) {
  const auto mode = Mode::MULTI_NODE_SINGLE_WRITER;
  ASSERT_TRUE(Stage(BlockStage("v1", mode)).ok());
  mounter_.FailNext(absl::InternalError("mount(2) failed"));

  EXPECT_FALSE(Publish(BlockPublish("v1", "rw", /*readonly=*/false, mode)).ok());
  EXPECT_EQ(transport_.WriterKey("/dev/fake1"), node_key_);

  EXPECT_TRUE(UnpublishAt("v1", "rw").ok());
  EXPECT_EQ(transport_.WriterKey("/dev/fake1"), 0u);
  EXPECT_TRUE(Unstage("v1").ok());
}

TEST_F(SingleWriterTest, OtherModesNeverChangeTheWriterAtPublish) {
  for (const auto mode :
       {Mode::MULTI_NODE_MULTI_WRITER, Mode::SINGLE_NODE_WRITER, Mode::MULTI_NODE_READER_ONLY}) {
    SCOPED_TRACE(Mode::Mode_Name(mode));
    ASSERT_TRUE(Stage(BlockStage("v1", mode)).ok());
    ASSERT_TRUE(Publish(BlockPublish("v1", "p", mode == Mode::MULTI_NODE_READER_ONLY, mode)).ok());
    ASSERT_TRUE(UnpublishAt("v1", "p").ok());
    ASSERT_TRUE(Unstage("v1").ok());
  }
  EXPECT_EQ(transport_.writer_changes(), 0);
}

}  // namespace
}  // namespace stagehand::driver

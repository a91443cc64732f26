// NodeGetVolumeHealth and NodeGetStorageHealth (CSI v1.13) with fakes: which paths are looked at,
// the codes of bad requests, and one entry per problem.

#include "tests/driver/node_service_fixture.h"

namespace stagehand::driver {
namespace {

using ::testing::HasSubstr;
using Code = grpc::StatusCode;

class NodeHealthTest : public NodeServiceTest {
 protected:
  grpc::Status Health(const std::string& id, csi::v1::NodeGetVolumeHealthResponse* resp,
                      const std::string& publish_path = "", const std::string& staging = "") {
    csi::v1::NodeGetVolumeHealthRequest req;
    req.set_volume_id(id);
    req.set_volume_publish_path(publish_path);
    req.set_staging_target_path(staging);
    grpc::ClientContext ctx;
    return stub_->NodeGetVolumeHealth(&ctx, req, resp);
  }
};

TEST_F(NodeHealthTest, BadRequestsGetTheSpecsCodes) {
  csi::v1::NodeGetVolumeHealthResponse resp;
  EXPECT_EQ(Health("", &resp).error_code(), Code::INVALID_ARGUMENT);
  EXPECT_EQ(Health("v1", &resp).error_code(), Code::NOT_FOUND);
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  EXPECT_EQ(Health("v1", &resp, root_ + "/not-published").error_code(), Code::NOT_FOUND);
  EXPECT_EQ(Health("v1", &resp, "", root_ + "/elsewhere").error_code(), Code::NOT_FOUND);
}

TEST_F(NodeHealthTest, AHealthyVolumeHasNoEntries) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  ASSERT_TRUE(Publish(PublishReq("v1")).ok());
  csi::v1::NodeGetVolumeHealthResponse resp;

  ASSERT_TRUE(Health("v1", &resp).ok());

  EXPECT_EQ(resp.volume_health().volume_id(), "v1");
  EXPECT_EQ(resp.volume_health().health_statuses_size(), 0) << resp.DebugString();
}

TEST_F(NodeHealthTest, EachProblemIsOneEntryWithItsReason) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  ASSERT_TRUE(Publish(PublishReq("v1")).ok());
  transport_.SetHealthy(false);
  ASSERT_TRUE(mounter_.Unmount(root_ + "/pod-v1").ok());
  csi::v1::NodeGetVolumeHealthResponse resp;

  ASSERT_TRUE(Health("v1", &resp).ok());

  ASSERT_EQ(resp.volume_health().health_statuses_size(), 2) << resp.DebugString();
  const auto& session = resp.volume_health().health_statuses(0);
  EXPECT_EQ(session.status(), csi::v1::INACCESSIBLE);
  EXPECT_EQ(session.reason(), "SessionGone");
  const auto& mount = resp.volume_health().health_statuses(1);
  EXPECT_EQ(mount.status(), csi::v1::INACCESSIBLE);
  EXPECT_EQ(mount.reason(), "PublishMountMissing");
  EXPECT_THAT(mount.message(), HasSubstr(root_ + "/pod-v1"));

  // Asked about the staging path only: its mount is there.
  resp.Clear();
  ASSERT_TRUE(Health("v1", &resp, "", root_ + "/stage-v1").ok());
  ASSERT_EQ(resp.volume_health().health_statuses_size(), 1) << resp.DebugString();
  EXPECT_EQ(resp.volume_health().health_statuses(0).reason(), "SessionGone");
}

// An unstage refused because the staging mount is busy undid nothing: the volume is still
// staged and served, and health answers for it (it answered NOT_FOUND "not staged here").
TEST_F(NodeHealthTest, AnUnstageRefusedAsBusyLeavesTheVolumeAnswering) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  mounter_.FailNext(absl::FailedPreconditionError("unmount: target is busy"));
  EXPECT_EQ(Unstage("v1").error_code(), Code::FAILED_PRECONDITION);
  ASSERT_TRUE(mounter_.IsMounted(root_ + "/stage-v1"));

  csi::v1::NodeGetVolumeHealthResponse resp;
  ASSERT_TRUE(Health("v1", &resp).ok());
  EXPECT_EQ(resp.volume_health().health_statuses_size(), 0) << resp.DebugString();
  // And a later unstage, once the mount's users are gone, completes.
  ASSERT_TRUE(Unstage("v1").ok());
  EXPECT_EQ(Health("v1", &resp).error_code(), Code::NOT_FOUND);
}

TEST_F(NodeHealthTest, StorageHealthAnswersWithoutProblemsOnAFakeTransport) {
  ASSERT_TRUE(Stage(StageReq("v1")).ok());
  grpc::ClientContext ctx;
  csi::v1::NodeGetStorageHealthResponse resp;

  ASSERT_TRUE(stub_->NodeGetStorageHealth(&ctx, {}, &resp).ok());

  EXPECT_EQ(resp.backend_health_size(), 0) << resp.DebugString();
}

}  // namespace
}  // namespace stagehand::driver

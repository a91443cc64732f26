// Bad input gets the code the CSI spec names and changes nothing.

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/subprocess.h"
#include "tests/integration/node_test_base.h"

namespace stagehand::testing {
namespace {

using Code = grpc::StatusCode;

class ValidationTest : public NodeIntegrationTest {};

TEST_F(ValidationTest, MalformedStageRequestsAreInvalidArgument) {
  AddLun();

  struct Case {
    const char* name;
    std::function<void(csi::v1::NodeStageVolumeRequest&)> mutate;
  };

  const Case cases[] = {
      {"no volume id", [](auto& r) { r.clear_volume_id(); }},
      {"no staging path", [](auto& r) { r.clear_staging_target_path(); }},
      {"relative staging path", [](auto& r) { r.set_staging_target_path("relative/stage"); }},
      {"traversing staging path",
       [this](auto& r) { r.set_staging_target_path(root_ + "/a/../stage"); }},
      {"no capability", [](auto& r) { r.clear_volume_capability(); }},
      {"no access type", [](auto& r) { r.mutable_volume_capability()->clear_mount(); }},
      {"unsupported fs",
       [](auto& r) { r.mutable_volume_capability()->mutable_mount()->set_fs_type("btrfs"); }},
      {"multi-writer ext4",
       [](auto& r) {
         r.mutable_volume_capability()->mutable_access_mode()->set_mode(
             csi::v1::VolumeCapability::AccessMode::MULTI_NODE_MULTI_WRITER);
       }},
      {"no portal", [](auto& r) { r.mutable_volume_context()->erase("targetPortal"); }},
      {"bad portal", [](auto& r) { (*r.mutable_volume_context())["targetPortal"] = "host:99999"; }},
      {"no iqn", [](auto& r) { r.mutable_volume_context()->erase("iqn"); }},
      {"bad lun", [](auto& r) { (*r.mutable_volume_context())["lun"] = "one"; }},
      {"half CHAP", [](auto& r) { (*r.mutable_secrets())["node.session.auth.username"] = "u"; }},
      {"staging inside state dir",
       [this](auto& r) { r.set_staging_target_path(daemon_->state_dir() + "/volumes/x"); }},
      // Every string is bounded (the CSI spec's limits): nothing of the caller's may grow
      // without limit, or block the stage behind the volume's lock.
      {"volume id of 129 bytes", [](auto& r) { r.set_volume_id(std::string(129, 'v')); }},
      {"volume id of 100000 bytes", [](auto& r) { r.set_volume_id(std::string(100000, 'v')); }},
      {"context key of 200 bytes",
       [](auto& r) { (*r.mutable_volume_context())[std::string(200, 'k')] = "x"; }},
      {"context of 8 KiB",
       [](auto& r) { (*r.mutable_volume_context())["padding"] = std::string(8192, 'x'); }},
      {"secrets of 100000 bytes",
       [](auto& r) {
         (*r.mutable_secrets())["node.session.auth.password"] = std::string(100000, 's');
       }},
      {"publish context of 8 KiB",
       [](auto& r) { (*r.mutable_publish_context())["padding"] = std::string(8192, 'x'); }},
      {"staging path of 5000 bytes",
       [this](auto& r) { r.set_staging_target_path(root_ + "/" + std::string(5000, 'p')); }},
      {"mount flags of 8 KiB",
       [](auto& r) {
         r.mutable_volume_capability()->mutable_mount()->add_mount_flags(std::string(8192, 'f'));
       }},
  };
  for (const auto& c : cases) {
    auto req = StageRequest("vol-v");
    c.mutate(req);

    const grpc::Status status = Stage(req);

    EXPECT_EQ(status.error_code(), Code::INVALID_ARGUMENT) << c.name;
    EXPECT_LT(status.error_message().size(), 1024u) << c.name << ": the message quotes no input";
    EXPECT_EQ(status.error_message().find("sssssss"), std::string::npos) << "no secret in it";
  }
  EXPECT_TRUE(testbed::Leftovers(root_).empty());
  // Nothing was held either: a sound stage of the same volume goes through at once.
  EXPECT_TRUE(Stage(StageRequest("vol-v")).ok());
  EXPECT_TRUE(Unstage("vol-v", Staging("vol-v")).ok());
}

TEST_F(ValidationTest, MalformedPublishRequestsAreRejected) {
  AddLun();
  ASSERT_TRUE(Stage(StageRequest("vol-p")).ok());
  // A symlink in the parent would make the bind mount land somewhere else than asked.
  ASSERT_EQ(mkdir((root_ + "/real").c_str(), 0755), 0);
  ASSERT_EQ(symlink((root_ + "/real").c_str(), (root_ + "/link").c_str()), 0);

  EXPECT_EQ(Publish(PublishRequest("vol-p", "relative")).error_code(), Code::INVALID_ARGUMENT);
  EXPECT_EQ(Publish(PublishRequest("vol-p", root_ + "/x/../y")).error_code(),
            Code::INVALID_ARGUMENT);
  EXPECT_EQ(Publish(PublishRequest("vol-p", root_ + "/link/pod")).error_code(),
            Code::INVALID_ARGUMENT);
  EXPECT_EQ(Publish(PublishRequest("vol-p", root_ + "/no/such/parent/pod")).error_code(),
            Code::INVALID_ARGUMENT);
  EXPECT_EQ(Publish(PublishRequest("vol-p", Staging("vol-p") + "/inside")).error_code(),
            Code::INVALID_ARGUMENT);
  EXPECT_EQ(Publish(PublishRequest("vol-p", root_ + "/pod", /*block=*/true)).error_code(),
            Code::INVALID_ARGUMENT);

  struct stat st {};

  EXPECT_NE(stat((root_ + "/real/pod").c_str(), &st), 0) << "nothing created behind the link";
  EXPECT_EQ(Publish(PublishRequest("never-staged", root_ + "/pod")).error_code(), Code::NOT_FOUND);
  csi::v1::NodeUnpublishVolumeRequest unpublish;
  unpublish.set_target_path(root_ + "/pod");
  csi::v1::NodeUnpublishVolumeResponse unpublish_resp;
  EXPECT_EQ(daemon_->node()
                .NodeUnpublishVolume(testbed::Ctx().get(), unpublish, &unpublish_resp)
                .error_code(),
            Code::INVALID_ARGUMENT);
  EXPECT_EQ(Unstage("", Staging("vol-p")).error_code(), Code::INVALID_ARGUMENT);

  EXPECT_TRUE(Unstage("vol-p", Staging("vol-p")).ok());
}

TEST_F(ValidationTest, UnstageOfAMountStagehandDidNotMakeFails) {
  const std::string foreign = root_ + "/foreign";
  ASSERT_EQ(mkdir(foreign.c_str(), 0755), 0);
  ASSERT_EQ(mount("tmpfs", foreign.c_str(), "tmpfs", 0, nullptr), 0);

  EXPECT_EQ(Unstage("vol-unknown", foreign).error_code(), Code::FAILED_PRECONDITION);
  EXPECT_EQ(Unpublish("vol-unknown", foreign).error_code(), Code::FAILED_PRECONDITION);

  EXPECT_EQ(umount(foreign.c_str()), 0);
}

TEST_F(ValidationTest, SecondInstanceOnTheSameStateOrSocketRefusesToStart) {
  RunOptions options;
  options.timeout = std::chrono::seconds(20);  // A second instance that started would hang here.

  auto same_state =
      RunProcess({testbed::StagehandBinary(), "--csi-endpoint=unix://" + root_ + "/other.sock",
                  "--state-dir=" + daemon_->state_dir(), "--runtime-dir=" + daemon_->runtime_dir()},
                 options);
  auto same_socket =
      RunProcess({testbed::StagehandBinary(), "--csi-endpoint=" + daemon_->endpoint(),
                  "--state-dir=" + root_ + "/state2", "--runtime-dir=" + root_ + "/run2"},
                 options);

  ASSERT_TRUE(same_state.ok()) << same_state.status();
  EXPECT_NE(same_state->exit_code, 0);
  EXPECT_NE(same_state->output.find("another stagehand is running"), std::string::npos)
      << same_state->output;
  ASSERT_TRUE(same_socket.ok()) << same_socket.status();
  EXPECT_NE(same_socket->exit_code, 0);
  csi::v1::GetPluginInfoResponse info;
  EXPECT_TRUE(daemon_->identity().GetPluginInfo(testbed::Ctx().get(), {}, &info).ok())
      << "the first instance keeps its socket";
  EXPECT_EQ(info.name(), "iscsi.stagehand.dev");
}

// A publish must not hide data (a non-empty directory, a file with data) nor land inside
// another volume's staging mount (that volume's unstage would then fail with EBUSY for good).
TEST_F(ValidationTest, PublishNeverHidesDataNorNestsInAnotherVolume) {
  AddLun();
  const std::string file2 = root_ + "/lun2.img";
  ASSERT_TRUE(testbed::MakeSparseFile(file2, 64ull << 20).ok());
  ASSERT_TRUE(tgtd_->AddLun(tid_, 2, file2).ok());
  auto stage_b = StageRequest("vol-b");
  (*stage_b.mutable_volume_context())["lun"] = "2";
  ASSERT_TRUE(Stage(StageRequest("vol-a")).ok());
  ASSERT_TRUE(Stage(stage_b).ok());
  const std::string full = root_ + "/full";
  ASSERT_EQ(mkdir(full.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFileAtomically(full + "/theirs", "data", 0644).ok());

  const grpc::Status hiding = Publish(PublishRequest("vol-a", full));
  const grpc::Status nested = Publish(PublishRequest("vol-b", Staging("vol-a") + "/x"));

  EXPECT_EQ(hiding.error_code(), Code::FAILED_PRECONDITION) << hiding.error_message();
  EXPECT_EQ(ReadFileToString(full + "/theirs").value_or(""), "data");
  EXPECT_EQ(nested.error_code(), Code::INVALID_ARGUMENT) << nested.error_message();
  EXPECT_TRUE(Unstage("vol-a", Staging("vol-a")).ok());
  EXPECT_TRUE(Unstage("vol-b", Staging("vol-b")).ok());
}

class MaxVolumesTest : public NodeIntegrationTest {
 protected:
  std::vector<std::string> DaemonFlags() const override { return {"--max-volumes-per-node=1"}; }
};

// The limit is counted where new records are saved: concurrent stages cannot all pass it.
TEST_F(MaxVolumesTest, ConcurrentStagesNeverExceedTheLimit) {
  AddLun();
  for (int lun = 2; lun <= 3; ++lun) {
    const std::string file = root_ + "/lun" + std::to_string(lun) + ".img";
    ASSERT_TRUE(testbed::MakeSparseFile(file, 64ull << 20).ok());
    ASSERT_TRUE(tgtd_->AddLun(tid_, lun, file).ok());
  }
  std::vector<csi::v1::NodeStageVolumeRequest> requests;
  for (int lun = 1; lun <= 3; ++lun) {
    auto req = StageRequest("vol-m" + std::to_string(lun), /*block=*/true);
    (*req.mutable_volume_context())["lun"] = std::to_string(lun);
    requests.push_back(req);
  }

  std::vector<grpc::Status> results(requests.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = Stage(requests[i]); });
  }
  for (auto& t : threads) {
    t.join();
  }

  int staged = 0;
  for (const auto& result : results) {
    if (result.ok()) {
      ++staged;
      continue;
    }
    EXPECT_EQ(result.error_code(), Code::RESOURCE_EXHAUSTED) << result.error_message();
  }
  EXPECT_EQ(staged, 1);
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_TRUE(Unstage(requests[i].volume_id(), requests[i].staging_target_path()).ok());
  }
}

}  // namespace
}  // namespace stagehand::testing

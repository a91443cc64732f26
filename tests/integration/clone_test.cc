// A LUN copied from another (what a clone or a snapshot restore gives: the same filesystem
// UUID) staged beside its source on one node. XFS refuses a second filesystem with a mounted
// UUID: stagehand mounts the clone with nouuid and says so; ext4 allows it and needs nothing.

#include <string>

#include <absl/strings/match.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/subprocess.h"
#include "testbed/stagehand_daemon.h"
#include "tests/integration/node_test_base.h"

namespace stagehand::testing {
namespace {

class CloneTest : public NodeIntegrationTest {
 protected:
  // Stages and publishes `fs_type` on LUN 1, writes a file, copies the LUN (live, as a
  // crash-consistent snapshot is) to LUN 2, stages and publishes that too: both read their
  // data, the clone's writes stay its own, and unstage leaves nothing.
  void StageASourceAndItsClone(const std::string& fs_type) {
    AddLun(320ull << 20);  // mkfs.xfs needs 300 MiB.
    const std::string source = root_ + "/pod-src";
    const std::string clone = root_ + "/pod-clone";
    ASSERT_TRUE(Stage(StageRequest("vol-src", false, fs_type)).ok());
    ASSERT_TRUE(Publish(PublishRequest("vol-src", source)).ok());
    ASSERT_TRUE(testbed::WriteDurably(source + "/data", "written before the copy\n"));

    const std::string copy = root_ + "/clone.img";
    auto copied = RunProcess({"cp", "--sparse=always", lun_file_, copy});
    ASSERT_TRUE(copied.ok() && copied->exit_code == 0) << copied.status();
    ASSERT_TRUE(tgtd_->AddLun(tid_, 2, copy).ok());
    auto request = StageRequest("vol-clone", false, fs_type);
    (*request.mutable_volume_context())["lun"] = "2";
    const grpc::Status staged = Stage(request);
    ASSERT_TRUE(staged.ok()) << staged.error_message();
    ASSERT_TRUE(Publish(PublishRequest("vol-clone", clone)).ok());

    EXPECT_EQ(ReadFileToString(clone + "/data").value_or(""), "written before the copy\n");
    ASSERT_TRUE(testbed::WriteDurably(clone + "/data", "the clone's own\n"));
    EXPECT_EQ(ReadFileToString(source + "/data").value_or(""), "written before the copy\n");
    volumes_ = RunProcess({STAGEHANDCTL_BINARY, "--agent-socket",
                           daemon_->runtime_dir() + "/agent.sock", "agent", "volumes"})
                   .value_or(ProcessResult{})
                   .output;

    EXPECT_TRUE(Unpublish("vol-clone", clone).ok());
    EXPECT_TRUE(Unstage("vol-clone", Staging("vol-clone")).ok());
    EXPECT_TRUE(Unpublish("vol-src", source).ok());
    EXPECT_TRUE(Unstage("vol-src", Staging("vol-src")).ok());
  }

  std::vector<std::string> DaemonFlags() const override { return {"--no-watch-plugins"}; }

  std::string volumes_;  // `stagehandctl agent volumes` while both were published.
};

TEST_F(CloneTest, AnXfsCloneIsMountedWithNouuidBesideItsSource) {
  StageASourceAndItsClone("xfs");
  EXPECT_TRUE(absl::StrContains(volumes_, "vol-clone: userspace")) << volumes_;
  EXPECT_EQ(absl::StrContains(volumes_, "nouuid"), true) << volumes_;
  EXPECT_TRUE(absl::StrContains(ReadFileToString(root_ + "/daemon.log").value_or(""),
                                "stage volume='vol-clone': another mounted XFS has the UUID"))
      << "logged once";
}

TEST_F(CloneTest, AnExt4CloneIsMountedBesideItsSourceAsItIs) {
  StageASourceAndItsClone("ext4");
  EXPECT_FALSE(absl::StrContains(volumes_, "nouuid")) << volumes_;
}

}  // namespace
}  // namespace stagehand::testing

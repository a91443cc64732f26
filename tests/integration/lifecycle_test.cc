// Full lifecycle of the built-in driver against a real tgtd: stage, publish, I/O, unpublish,
// unstage, and stage again without reformatting.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "mounter/volume_stats.h"
#include "tests/integration/node_test_base.h"

namespace stagehand::testing {
namespace {

using Code = grpc::StatusCode;

class LifecycleTest : public NodeIntegrationTest {};

TEST_F(LifecycleTest, MountVolumeKeepsItsDataAcrossUnstageAndRestage) {
  AddLun();
  const std::string target = root_ + "/pod1";

  ASSERT_TRUE(Stage(StageRequest("vol-a")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-a", target)).ok());
  ASSERT_TRUE(WriteFileAtomically(target + "/data.txt", "precious data\n", 0644).ok());
  ASSERT_EQ(Unpublish("vol-a", target).error_code(), Code::OK);

  struct stat st {};

  EXPECT_NE(stat(target.c_str(), &st), 0) << "target path must be removed";
  ASSERT_EQ(Unstage("vol-a", Staging("vol-a")).error_code(), Code::OK);
  EXPECT_TRUE(testbed::Leftovers(root_).empty());

  ASSERT_TRUE(Stage(StageRequest("vol-a")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-a", target)).ok());
  auto text = ReadFileToString(target + "/data.txt");

  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "precious data\n");
  EXPECT_TRUE(Unpublish("vol-a", target).ok());
  EXPECT_TRUE(Unstage("vol-a", Staging("vol-a")).ok());
}

TEST_F(LifecycleTest, XfsVolumeIsFormattedAndMounted) {
  AddLun(320ull << 20);  // mkfs.xfs needs 300 MiB.
  const std::string target = root_ + "/pod1";

  ASSERT_TRUE(Stage(StageRequest("vol-x", false, "xfs")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-x", target)).ok());
  ASSERT_TRUE(WriteFileAtomically(target + "/f", "xfs\n", 0644).ok());

  EXPECT_TRUE(Unpublish("vol-x", target).ok());
  EXPECT_TRUE(Unstage("vol-x", Staging("vol-x")).ok());
}

TEST_F(LifecycleTest, BlockVolumeIsPublishedAsADeviceFile) {
  AddLun();
  const std::string target = root_ + "/blockdev";
  std::vector<char> pattern(4096, 'z');

  ASSERT_TRUE(Stage(StageRequest("vol-b", /*block=*/true)).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-b", target, /*block=*/true)).ok());
  {
    int fd = open(target.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    ASSERT_GE(fd, 0) << strerror(errno);
    void* buf = nullptr;
    ASSERT_EQ(posix_memalign(&buf, 4096, 4096), 0);
    memcpy(buf, pattern.data(), 4096);
    EXPECT_EQ(pwrite(fd, buf, 4096, 1 << 20), 4096);
    EXPECT_EQ(fsync(fd), 0);
    free(buf);
    close(fd);
  }
  ASSERT_TRUE(Unpublish("vol-b", target).ok());
  ASSERT_TRUE(Unstage("vol-b", Staging("vol-b")).ok());

  // The data reached the LUN's backing file on the target.
  int fd = open(lun_file_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::vector<char> back(4096);
  EXPECT_EQ(pread(fd, back.data(), 4096, 1 << 20), 4096);
  close(fd);
  EXPECT_EQ(back, pattern);
}

TEST_F(LifecycleTest, EveryCallIsIdempotent) {
  AddLun();
  const std::string target = root_ + "/pod1";

  EXPECT_TRUE(Stage(StageRequest("vol-i")).ok());
  EXPECT_TRUE(Stage(StageRequest("vol-i")).ok());
  EXPECT_TRUE(Publish(PublishRequest("vol-i", target)).ok());
  EXPECT_TRUE(Publish(PublishRequest("vol-i", target)).ok());
  EXPECT_TRUE(Unpublish("vol-i", target).ok());
  EXPECT_TRUE(Unpublish("vol-i", target).ok());
  EXPECT_TRUE(Unstage("vol-i", Staging("vol-i")).ok());
  EXPECT_TRUE(Unstage("vol-i", Staging("vol-i")).ok());
}

TEST_F(LifecycleTest, ConflictingRepeatsAreAlreadyExists) {
  AddLun();
  const std::string target = root_ + "/pod1";
  ASSERT_TRUE(Stage(StageRequest("vol-c")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-c", target)).ok());

  EXPECT_EQ(Stage(StageRequest("vol-c", false, "xfs")).error_code(), Code::ALREADY_EXISTS);
  EXPECT_EQ(Publish(PublishRequest("vol-c", target, false, /*readonly=*/true)).error_code(),
            Code::ALREADY_EXISTS);
  EXPECT_EQ(Unstage("vol-c", Staging("vol-c")).error_code(), Code::FAILED_PRECONDITION)
      << "must not unstage while published";

  EXPECT_TRUE(Unpublish("vol-c", target).ok());
  EXPECT_TRUE(Unstage("vol-c", Staging("vol-c")).ok());
}

TEST_F(LifecycleTest, ReadOnlyPublishRefusesWrites) {
  AddLun();
  const std::string rw = root_ + "/rw";
  const std::string ro = root_ + "/ro";
  ASSERT_TRUE(Stage(StageRequest("vol-r")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-r", rw)).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-r", ro, false, /*readonly=*/true)).ok());

  int fd = open((ro + "/nope").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  const int err = errno;

  EXPECT_LT(fd, 0);
  EXPECT_EQ(err, EROFS);
  EXPECT_TRUE(WriteFileAtomically(rw + "/yes", "ok", 0644).ok());
  EXPECT_TRUE(Unpublish("vol-r", ro).ok());
  EXPECT_TRUE(Unpublish("vol-r", rw).ok());
  EXPECT_TRUE(Unstage("vol-r", Staging("vol-r")).ok());
}

// What the kubelet writes into the CSINode's allocatable count: with session processes, the
// volumes staged plus what the memory left allows (16 MiB each); never 0 (unlimited).
TEST_F(LifecycleTest, NodeInfoCountsTheStagedVolumesAndTheRoomLeft) {
  auto max_volumes = [this] {
    csi::v1::NodeGetInfoResponse info;
    const grpc::Status s =
        daemon_->node().NodeGetInfo(testbed::Ctx().get(), csi::v1::NodeGetInfoRequest(), &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info.max_volumes_per_node();
  };
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t total_kib = 0;
  ASSERT_TRUE(meminfo >> key >> total_kib && key == "MemTotal:");
  const int64_t most = total_kib / 16384;

  const int64_t empty = max_volumes();
  EXPECT_GT(empty, 0);
  EXPECT_LE(empty, most);
  AddLun();
  ASSERT_TRUE(Stage(StageRequest("vol-i")).ok());
  const int64_t one = max_volumes();
  EXPECT_GE(one, 1);
  EXPECT_LE(one, 1 + most);
  EXPECT_EQ(Unstage("vol-i", Staging("vol-i")).error_code(), Code::OK);
}

TEST_F(LifecycleTest, StatsReportBytesInodesAndANormalCondition) {
  AddLun();
  const std::string target = root_ + "/pod1";
  ASSERT_TRUE(Stage(StageRequest("vol-s")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-s", target)).ok());

  csi::v1::NodeGetVolumeStatsResponse resp;
  ASSERT_TRUE(Stats("vol-s", target, &resp).ok());

  ASSERT_EQ(resp.usage_size(), 2);
  EXPECT_EQ(resp.usage(0).unit(), csi::v1::VolumeUsage::BYTES);
  EXPECT_GT(resp.usage(0).total(), 100 << 20);
  EXPECT_EQ(resp.usage(1).unit(), csi::v1::VolumeUsage::INODES);
  EXPECT_GT(resp.usage(1).total(), 0);
  EXPECT_FALSE(resp.volume_condition().abnormal()) << resp.volume_condition().message();
  csi::v1::NodeGetVolumeStatsResponse missing;
  EXPECT_EQ(Stats("vol-s", root_ + "/elsewhere", &missing).error_code(), Code::NOT_FOUND);
  EXPECT_EQ(Stats("no-such-volume", target, &missing).error_code(), Code::NOT_FOUND);
  EXPECT_TRUE(Unpublish("vol-s", target).ok());
  EXPECT_TRUE(Unstage("vol-s", Staging("vol-s")).ok());
}

// The source of the mount at `target` in /proc/self/mountinfo ("/dev/loop3"), or "".
std::string MountSource(const std::string& target) {
  auto table = ReadFileToString("/proc/self/mountinfo");
  if (!table.ok()) {
    return "";
  }
  std::istringstream lines(*table);
  std::string line;
  std::string source;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::vector<std::string> f{std::istream_iterator<std::string>(fields), {}};
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() > 4 && f[4] == target && dash != f.end() && dash + 2 < f.end()) {
      source = *(dash + 2);  // The last (topmost) mount there wins.
    }
  }
  return source;
}

// The kubelet's SELinux mount option (a CSIDriver with seLinuxMount): quoted, with the commas
// of its MLS level. libmount drops it where SELinux is disabled (this host), so the mount works;
// a publish that names another context is refused, one with the staged context is bound.
TEST_F(LifecycleTest, TheKubeletsQuotedSelinuxContextMountsAndOnlyThatContextPublishes) {
  AddLun();
  const std::string context = R"(context="system_u:object_r:container_file_t:s0:c15,c25")";
  auto stage = StageRequest("vol-z");
  stage.mutable_volume_capability()->mutable_mount()->add_mount_flags(context);
  ASSERT_TRUE(Stage(stage).ok());

  const std::string target = root_ + "/pod-z";
  auto other = PublishRequest("vol-z", target);
  other.mutable_volume_capability()->mutable_mount()->add_mount_flags(
      R"(context="system_u:object_r:container_file_t:s0:c1,c2")");
  const grpc::Status refused = Publish(other);
  EXPECT_EQ(refused.error_code(), Code::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), ::testing::HasSubstr("one context"));
  EXPECT_TRUE(MountSource(target).empty()) << "nothing may be mounted for a refused publish";

  auto same = PublishRequest("vol-z", target);
  same.mutable_volume_capability()->mutable_mount()->add_mount_flags(context);
  ASSERT_TRUE(Publish(same).ok());
  { std::ofstream(target + "/proof") << "selinux\n"; }
  {
    std::ifstream back(Staging("vol-z") + "/proof");
    std::string line;
    EXPECT_TRUE(std::getline(back, line) && line == "selinux");
  }
  EXPECT_TRUE(Unpublish("vol-z", target).ok());
  EXPECT_TRUE(Unstage("vol-z", Staging("vol-z")).ok());
}

TEST_F(LifecycleTest, AFailedFilesystemIsAbnormalUntilItIsStagedAgain) {
  AddLun();
  const std::string target = root_ + "/pod1";
  auto stage = StageRequest("vol-f");
  stage.mutable_volume_capability()->mutable_mount()->add_mount_flags("errors=remount-ro");
  ASSERT_TRUE(Stage(stage).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-f", target)).ok());
  csi::v1::NodeGetVolumeStatsResponse resp;
  ASSERT_TRUE(Stats("vol-f", target, &resp).ok());
  ASSERT_FALSE(resp.volume_condition().abnormal()) << resp.volume_condition().message();

  // An ext4 error as I/O errors cause it: with errors=remount-ro the kernel aborts the journal
  // and marks the superblock emergency_ro, which statvfs does not show.
  const std::string device = MountSource(Staging("vol-f"));
  ASSERT_TRUE(device.starts_with("/dev/")) << device;
  const std::string trigger =
      "/sys/fs/ext4/" + device.substr(device.rfind('/') + 1) + "/trigger_fs_error";
  { std::ofstream(trigger) << "stagehand lifecycle test\n"; }
  const int fd = open((target + "/after").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  EXPECT_EQ(fd < 0 ? errno : 0, EROFS) << "the filesystem must refuse writes now";
  if (fd >= 0) {
    close(fd);
  }
  for (const std::string& path : {target, Staging("vol-f")}) {
    resp.Clear();
    ASSERT_TRUE(Stats("vol-f", path, &resp).ok());
    EXPECT_TRUE(resp.volume_condition().abnormal()) << path;
    EXPECT_THAT(resp.volume_condition().message(), ::testing::HasSubstr("emergency_ro")) << path;
  }
  csi::v1::NodeGetVolumeHealthResponse health;
  ASSERT_TRUE(Health("vol-f", &health).ok());
  ASSERT_EQ(health.volume_health().health_statuses_size(), 1) << health.DebugString();
  EXPECT_EQ(health.volume_health().health_statuses(0).status(), csi::v1::INACCESSIBLE);
  EXPECT_EQ(health.volume_health().health_statuses(0).reason(), "FilesystemFailed");

  // What the message tells the user to do: unpublish and unstage (the pods restarted); the next
  // stage checks the filesystem and it is healthy again.
  ASSERT_EQ(Unpublish("vol-f", target).error_code(), Code::OK);
  ASSERT_EQ(Unstage("vol-f", Staging("vol-f")).error_code(), Code::OK);
  ASSERT_TRUE(Stage(stage).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-f", target)).ok());
  resp.Clear();
  ASSERT_TRUE(Stats("vol-f", target, &resp).ok());
  EXPECT_FALSE(resp.volume_condition().abnormal()) << resp.volume_condition().message();
  EXPECT_TRUE(Unpublish("vol-f", target).ok());
  EXPECT_TRUE(Unstage("vol-f", Staging("vol-f")).ok());
}

TEST_F(LifecycleTest, ExpandPicksUpTheGrownLunAndGrowsXfsOnline) {
  AddLun(320ull << 20);
  const std::string fs_target = root_ + "/pod-fs";
  ASSERT_TRUE(Stage(StageRequest("vol-e", false, "xfs")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-e", fs_target)).ok());
  auto before = mounter::StatFilesystem(fs_target);
  ASSERT_TRUE(before.ok());

  // The "controller" grows the LUN: a bigger backing file, picked up by tgtd on restart.
  ASSERT_EQ(truncate(lun_file_.c_str(), 512ll << 20), 0);
  ASSERT_TRUE(tgtd_->Restart().ok());
  csi::v1::NodeExpandVolumeRequest req;
  req.set_volume_id("vol-e");
  req.set_volume_path(fs_target);
  req.mutable_capacity_range()->set_required_bytes(512ll << 20);
  csi::v1::NodeExpandVolumeResponse resp;
  auto s = daemon_->node().NodeExpandVolume(testbed::Ctx().get(), req, &resp);

  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.capacity_bytes(), 512ll << 20);
  auto after = mounter::StatFilesystem(fs_target);
  ASSERT_TRUE(after.ok());
  EXPECT_GT(after->capacity_bytes, before->capacity_bytes + (150ll << 20));
  EXPECT_TRUE(WriteFileAtomically(fs_target + "/after-grow", "ok", 0644).ok());
  EXPECT_TRUE(Unpublish("vol-e", fs_target).ok());
  EXPECT_TRUE(Unstage("vol-e", Staging("vol-e")).ok());
}

}  // namespace
}  // namespace stagehand::testing

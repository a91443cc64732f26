#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/unique_fd.h"
#include "mounter/filesystem.h"
#include "mounter/libmount_mounter.h"
#include "mounter/volume_stats.h"
#include "tests/mounter/loop_device_fixture.h"
#include "tests/testing/status_matchers.h"

namespace stagehand::mounter {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::Contains;
using ::testing::Field;
using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

// Each test starts with an ext4 loop device `loop_` and an empty directory `mnt_`.
class LibmountMounterIntegrationTest : public LoopDeviceTest {
 protected:
  void SetUp() override {
    LoopDeviceTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    absl::StatusOr<std::string> loop = AttachLoop(64 * kMiB);
    ASSERT_THAT(loop, IsOk());
    loop_ = *loop;
    ASSERT_THAT(Format(loop_, "ext4"), IsOk());
    absl::StatusOr<std::string> mnt = MakeDir("mnt");
    ASSERT_THAT(mnt, IsOk());
    mnt_ = *mnt;
  }

  MountRequest Ext4Request() const { return {loop_, mnt_, "ext4", {"noatime"}}; }

  // Creates `mnt_/name` (on the ext4) and returns its path.
  std::string MakeDirOnVolume(const std::string& name) {
    std::string path = mnt_ + "/" + name;
    EXPECT_EQ(mkdir(path.c_str(), 0755), 0) << ErrnoText(errno);
    return path;
  }

  LibmountMounter mounter_;
  std::string loop_;
  std::string mnt_;
};

TEST_F(LibmountMounterIntegrationTest, MountAndUnmountAreIdempotent) {
  ASSERT_THAT(mounter_.Mount(Ext4Request()), IsOk());
  EXPECT_THAT(mounter_.Mount(Ext4Request()), IsOk());

  absl::StatusOr<std::optional<MountInfo>> found = mounter_.Find(mnt_);
  ASSERT_THAT(found, IsOk());
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->source, loop_);
  EXPECT_EQ((*found)->fstype, "ext4");
  EXPECT_EQ((*found)->root, "/");
  EXPECT_THAT((*found)->options, HasSubstr("noatime"));
  EXPECT_THAT(mounter_.List().value(), Contains(Field(&MountInfo::target, mnt_)));

  EXPECT_THAT(mounter_.Unmount(mnt_), IsOk());
  EXPECT_EQ(mounter_.Find(mnt_).value(), std::nullopt);
  EXPECT_THAT(mounter_.Unmount(mnt_), IsOk());
  EXPECT_THAT(mounter_.Unmount(PathFor("no-such-dir")), IsOk());
}

TEST_F(LibmountMounterIntegrationTest, OccupiedTargetIsFailedPrecondition) {
  ASSERT_THAT(mounter_.Mount({"tmpfs", mnt_, "tmpfs", {"size=1m"}}), IsOk());

  EXPECT_THAT(mounter_.Mount(Ext4Request()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("tmpfs")));
  EXPECT_THAT(mounter_.Mount({"tmpfs", mnt_, "tmpfs", {"size=1m"}}), IsOk());
}

TEST_F(LibmountMounterIntegrationTest, ReadOnlyStateMustMatchAnExistingMount) {
  ASSERT_THAT(mounter_.Mount(Ext4Request()), IsOk());

  EXPECT_THAT(mounter_.Mount({loop_, mnt_, "ext4", {"ro"}}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("read-write")));
}

TEST_F(LibmountMounterIntegrationTest, MountThroughASymlinkIsIdempotent) {
  // CSI sources are /dev/disk/by-path/… symlinks; mountinfo shows the resolved /dev/loopN.
  const std::string link = PathFor("by-path-lun-0");
  ASSERT_EQ(symlink(loop_.c_str(), link.c_str()), 0) << ErrnoText(errno);
  ASSERT_THAT(mounter_.Mount({link, mnt_, "ext4", {}}), IsOk());

  EXPECT_THAT(mounter_.Mount({link, mnt_, "ext4", {}}), IsOk());
  EXPECT_THAT(mounter_.Mount({loop_, mnt_, "ext4", {}}), IsOk());
  EXPECT_EQ(mounter_.Find(mnt_).value()->source, loop_);
}

TEST_F(LibmountMounterIntegrationTest, ReadWriteMountOfWriteProtectedDeviceFails) {
  absl::StatusOr<std::string> ro_loop = AttachReadOnlyAlias(loop_);
  ASSERT_THAT(ro_loop, IsOk());

  // mount(8) would fall back to read-only here; we must not.
  EXPECT_THAT(mounter_.Mount({*ro_loop, mnt_, "ext4", {}}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(mounter_.Find(mnt_).value(), std::nullopt);
  EXPECT_THAT(mounter_.Mount({*ro_loop, mnt_, "ext4", {"ro"}}), IsOk());
  EXPECT_TRUE(StatFilesystem(mnt_).value().read_only);
}

TEST_F(LibmountMounterIntegrationTest, MountFailuresCarryErrnoCodes) {
  EXPECT_THAT(mounter_.Mount({loop_, PathFor("missing"), "ext4", {}}),
              StatusIs(absl::StatusCode::kNotFound));
  // Wrong type for what is on the device: EINVAL from mount(2).
  EXPECT_THAT(mounter_.Mount({loop_, mnt_, "xfs", {}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(mounter_.Find(mnt_).value(), std::nullopt);
}

TEST_F(LibmountMounterIntegrationTest, BusyUnmountIsFailedPrecondition) {
  ASSERT_THAT(mounter_.Mount(Ext4Request()), IsOk());
  UniqueFd open_file(open((mnt_ + "/f").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(open_file.Valid()) << ErrnoText(errno);

  EXPECT_THAT(mounter_.Unmount(mnt_), StatusIs(absl::StatusCode::kFailedPrecondition));

  open_file.Reset();
  EXPECT_THAT(mounter_.Unmount(mnt_), IsOk());
}

TEST_F(LibmountMounterIntegrationTest, ReadOnlyBindRefusesWrites) {
  ASSERT_THAT(mounter_.Mount(Ext4Request()), IsOk());
  const std::string data = MakeDirOnVolume("data");
  absl::StatusOr<std::string> pub = MakeDir("pub");
  ASSERT_THAT(pub, IsOk());

  ASSERT_THAT(mounter_.Bind(data, *pub, true, {"nosuid", "nodev"}), IsOk());

  UniqueFd fd(open((*pub + "/f").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  EXPECT_FALSE(fd.Valid());
  EXPECT_EQ(errno, EROFS);
  std::optional<MountInfo> bind = mounter_.Find(*pub).value();
  ASSERT_TRUE(bind.has_value());
  EXPECT_EQ(bind->root, "/data");
  EXPECT_THAT(bind->options, HasSubstr("nosuid"));
  EXPECT_TRUE(StatFilesystem(*pub).value().read_only);
  EXPECT_FALSE(StatFilesystem(mnt_).value().read_only);
  EXPECT_THAT(mounter_.Bind(data, *pub, true, {"nosuid", "nodev"}), IsOk());
  EXPECT_THAT(mounter_.Bind(data, *pub, false, {}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("read-only")));
  EXPECT_THAT(mounter_.Unmount(*pub), IsOk());
}

TEST_F(LibmountMounterIntegrationTest, ReadOnlyBindKeepsTheSourceRestrictions) {
  absl::StatusOr<std::string> src = MakeDir("src");
  ASSERT_THAT(src, IsOk());
  ASSERT_THAT(mounter_.Mount({"tmpfs", *src, "tmpfs", {"nosuid", "noexec", "size=1m"}}), IsOk());
  absl::StatusOr<std::string> pub = MakeDir("pub");
  ASSERT_THAT(pub, IsOk());

  ASSERT_THAT(mounter_.Bind(*src, *pub, true, {"nodev"}), IsOk());

  const std::string options = mounter_.Find(*pub).value()->options;
  EXPECT_THAT(options, HasSubstr("ro,"));
  EXPECT_THAT(options, HasSubstr("nosuid"));
  EXPECT_THAT(options, HasSubstr("nodev"));
  EXPECT_THAT(options, HasSubstr("noexec"));
}

TEST_F(LibmountMounterIntegrationTest, WritableBindAcceptsWrites) {
  ASSERT_THAT(mounter_.Mount(Ext4Request()), IsOk());
  const std::string data = MakeDirOnVolume("data");
  absl::StatusOr<std::string> pub = MakeDir("pub");
  ASSERT_THAT(pub, IsOk());

  ASSERT_THAT(mounter_.Bind(data, *pub, false, {}), IsOk());

  UniqueFd fd(open((*pub + "/f").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  EXPECT_TRUE(fd.Valid()) << ErrnoText(errno);
  fd.Reset();

  struct stat st = {};
  EXPECT_EQ(stat((data + "/f").c_str(), &st), 0);
  EXPECT_THAT(mounter_.Bind(data, *pub, false, {}), IsOk());
  EXPECT_THAT(mounter_.Bind(data, *pub, true, {}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("read-write")));
}

TEST_F(LibmountMounterIntegrationTest, BindOfAnotherSourceIsFailedPrecondition) {
  ASSERT_THAT(mounter_.Mount(Ext4Request()), IsOk());
  const std::string a = MakeDirOnVolume("a");
  const std::string b = MakeDirOnVolume("b");
  absl::StatusOr<std::string> pub = MakeDir("pub");
  ASSERT_THAT(pub, IsOk());
  ASSERT_THAT(mounter_.Bind(a, *pub, false, {}), IsOk());

  EXPECT_THAT(mounter_.Bind(b, *pub, false, {}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("/a")));
}

TEST_F(LibmountMounterIntegrationTest, BindsABlockDeviceNodeOntoAFile) {
  absl::StatusOr<std::string> node = MakeFile("blockdev");
  ASSERT_THAT(node, IsOk());

  ASSERT_THAT(mounter_.Bind(loop_, *node, false, {"nosuid"}), IsOk());

  struct stat loop_st = {};
  struct stat node_st = {};
  ASSERT_EQ(stat(loop_.c_str(), &loop_st), 0);
  ASSERT_EQ(stat(node->c_str(), &node_st), 0);
  EXPECT_TRUE(S_ISBLK(node_st.st_mode));
  EXPECT_EQ(node_st.st_rdev, loop_st.st_rdev);
  EXPECT_THAT(mounter_.Bind(loop_, *node, false, {"nosuid"}), IsOk());
  EXPECT_THAT(BlockDeviceSize(*node).value(), 64 * kMiB);
  EXPECT_THAT(mounter_.Unmount(*node), IsOk());
  EXPECT_THAT(mounter_.Unmount(*node), IsOk());
}

TEST_F(LibmountMounterIntegrationTest, BindOfMissingSourceIsNotFound) {
  absl::StatusOr<std::string> pub = MakeDir("pub");
  ASSERT_THAT(pub, IsOk());

  EXPECT_THAT(mounter_.Bind(PathFor("missing"), *pub, false, {}),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(LibmountMounterIntegrationTest, StatFilesystemReportsUsage) {
  ASSERT_THAT(mounter_.Mount(Ext4Request()), IsOk());

  absl::StatusOr<FsStats> stats = StatFilesystem(mnt_);

  ASSERT_THAT(stats, IsOk());
  EXPECT_GT(stats->capacity_bytes, 32 * kMiB);
  EXPECT_LE(stats->capacity_bytes, 64 * kMiB);
  EXPECT_GT(stats->available_bytes, 0);
  EXPECT_LE(stats->available_bytes, stats->capacity_bytes - stats->used_bytes);
  EXPECT_GT(stats->inodes, 0);
  EXPECT_GT(stats->inodes_used, 0);  // The root directory and lost+found.
  EXPECT_EQ(stats->inodes_used + stats->inodes_free, stats->inodes);
  EXPECT_FALSE(stats->read_only);
  EXPECT_THAT(StatFilesystem(PathFor("missing")), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace stagehand::mounter

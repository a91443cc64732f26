#include <fcntl.h>
#include <linux/capability.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/unique_fd.h"
#include "mounter/blkid_block_probe.h"
#include "mounter/filesystem.h"
#include "mounter/filesystem_health.h"
#include "mounter/libmount_mounter.h"
#include "mounter/volume_stats.h"
#include "tests/mounter/loop_device_fixture.h"
#include "tests/testing/status_matchers.h"

namespace stagehand::mounter {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

bool HasEffectiveCapability(int cap) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  std::array<__user_cap_data_struct, _LINUX_CAPABILITY_U32S_3> data{};
  if (syscall(SYS_capget, &header, data.data()) != 0) {
    return false;
  }
  return (data[cap / 32].effective & (1u << (cap % 32))) != 0;
}

using FilesystemIntegrationTest = LoopDeviceTest;

TEST_F(FilesystemIntegrationTest, RejectsUnsupportedTypesAndRelativeDevices) {
  EXPECT_THAT(Format("/dev/null", "btrfs"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Format("-n", "ext4"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Check("/dev/null", "ext3"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Grow("/dev/null", "/mnt", "zfs"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(FilesystemIntegrationTest, CheckPassesOnAFreshFilesystem) {
  absl::StatusOr<std::string> loop = AttachLoop(64 * kMiB);
  ASSERT_THAT(loop, IsOk());
  ASSERT_THAT(Format(*loop, "ext4"), IsOk());

  EXPECT_THAT(Check(*loop, "ext4"), IsOk());
  EXPECT_THAT(Check(*loop, "xfs"), IsOk());  // No-op by contract.
}

TEST_F(FilesystemIntegrationTest, CheckOfADestroyedSuperblockIsFailedPrecondition) {
  absl::StatusOr<std::string> loop = AttachLoop(64 * kMiB);
  ASSERT_THAT(loop, IsOk());
  ASSERT_THAT(Format(*loop, "ext4"), IsOk());
  ASSERT_THAT(WriteAt(*loop, 1024, std::string(1024, '\0')), IsOk());

  EXPECT_THAT(Check(*loop, "ext4"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(*loop)));
}

TEST_F(FilesystemIntegrationTest, FormatFailureCarriesTheToolOutput) {
  absl::StatusOr<std::string> loop = AttachLoop(16 * kMiB);  // Far below xfs's minimum size.
  ASSERT_THAT(loop, IsOk());

  EXPECT_THAT(Format(*loop, "xfs"), StatusIs(absl::StatusCode::kInternal, HasSubstr("mkfs.xfs")));
}

TEST_F(FilesystemIntegrationTest, GrowsUnmountedExt4ToTheEnlargedDevice) {
  absl::StatusOr<std::string> loop = AttachLoop(64 * kMiB);
  ASSERT_THAT(loop, IsOk());
  ASSERT_THAT(Format(*loop, "ext4"), IsOk());
  ASSERT_THAT(ResizeLoop(*loop, 128 * kMiB), IsOk());
  ASSERT_EQ(BlockDeviceSize(*loop).value(), 128 * kMiB);

  ASSERT_THAT(Grow(*loop, "", "ext4"), IsOk());

  absl::StatusOr<std::string> mnt = MakeDir("mnt");
  ASSERT_THAT(mnt, IsOk());
  LibmountMounter mounter;
  ASSERT_THAT(mounter.Mount({*loop, *mnt, "ext4", {}}), IsOk());
  EXPECT_GT(StatFilesystem(*mnt).value().capacity_bytes, 100 * kMiB);
}

TEST_F(FilesystemIntegrationTest, GrowsMountedExt4ToTheEnlargedDevice) {
  if (!HasEffectiveCapability(CAP_SYS_RESOURCE)) {
    // ext4's EXT4_IOC_RESIZE_FS demands it; resize2fs then fails with "Permission denied".
    GTEST_SKIP() << "online ext4 resize needs CAP_SYS_RESOURCE";
  }
  absl::StatusOr<std::string> loop = AttachLoop(64 * kMiB);
  ASSERT_THAT(loop, IsOk());
  ASSERT_THAT(Format(*loop, "ext4"), IsOk());
  absl::StatusOr<std::string> mnt = MakeDir("mnt");
  ASSERT_THAT(mnt, IsOk());
  LibmountMounter mounter;
  ASSERT_THAT(mounter.Mount({*loop, *mnt, "ext4", {}}), IsOk());
  const int64_t before = StatFilesystem(*mnt).value().capacity_bytes;
  ASSERT_THAT(ResizeLoop(*loop, 128 * kMiB), IsOk());

  ASSERT_THAT(Grow(*loop, *mnt, "ext4"), IsOk());

  EXPECT_GT(StatFilesystem(*mnt).value().capacity_bytes, before + 48 * kMiB);
}

TEST_F(FilesystemIntegrationTest, FormatsAndGrowsXfs) {
  absl::StatusOr<std::string> loop = AttachLoop(512 * kMiB);  // xfsprogs >= 5.19: 300 MiB min.
  ASSERT_THAT(loop, IsOk());

  ASSERT_THAT(Format(*loop, "xfs"), IsOk());

  BlkidBlockProbe probe;
  absl::StatusOr<ProbeResult> r = probe.Probe(*loop);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->kind, ProbeResult::Kind::kFilesystem);
  EXPECT_EQ(r->type, "xfs");
  absl::StatusOr<std::string> mnt = MakeDir("mnt");
  ASSERT_THAT(mnt, IsOk());
  LibmountMounter mounter;
  ASSERT_THAT(mounter.Mount({*loop, *mnt, "xfs", {}}), IsOk());
  const int64_t before = StatFilesystem(*mnt).value().capacity_bytes;
  ASSERT_THAT(ResizeLoop(*loop, 768 * kMiB), IsOk());
  ASSERT_THAT(Grow(*loop, *mnt, "xfs"), IsOk());
  EXPECT_GT(StatFilesystem(*mnt).value().capacity_bytes, before + 200 * kMiB);
}

// XFS_IOC_GOINGDOWN, which ext4 has too as EXT4_IOC_SHUTDOWN (neither header is installed), with
// XFS_FSOP_GOING_FLAGS_NOLOGFLUSH: what a failed journal write does to the filesystem.
constexpr unsigned long kShutDown = _IOR('X', 125, uint32_t);
constexpr uint32_t kNoLogFlush = 2;

class FilesystemShutdownTest : public LoopDeviceTest,
                               public ::testing::WithParamInterface<const char*> {};

// A filesystem that shut itself down is failed: ext4 says so in its superblock options, xfs
// only by refusing a stat of its root.
TEST_P(FilesystemShutdownTest, AShutDownFilesystemIsFailed) {
  const std::string fstype = GetParam();
  absl::StatusOr<std::string> loop = AttachLoop(320 * kMiB);
  ASSERT_THAT(loop, IsOk());
  ASSERT_THAT(Format(*loop, fstype), IsOk());
  absl::StatusOr<std::string> mnt = MakeDir("mnt");
  ASSERT_THAT(mnt, IsOk());
  LibmountMounter mounter;
  ASSERT_THAT(mounter.Mount({*loop, *mnt, fstype, {}}), IsOk());
  auto mounted = [&]() -> MountInfo {
    for (auto& m : mounter.List().value_or(std::vector<MountInfo>{})) {
      if (m.target == *mnt) {
        return m;
      }
    }
    ADD_FAILURE() << *mnt << " is not mounted";
    return {};
  };
  EXPECT_FALSE(CheckFilesystem(mounted(), /*mounted_writable=*/true).has_value());

  {
    UniqueFd root(open(mnt->c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root);
    uint32_t flags = kNoLogFlush;
    ASSERT_EQ(ioctl(root.Get(), kShutDown, &flags), 0) << ErrnoText(errno);
  }

  auto problem = CheckFilesystem(mounted(), /*mounted_writable=*/true);
  ASSERT_TRUE(problem.has_value());
  EXPECT_TRUE(problem->failed);
  EXPECT_THAT(problem->message, HasSubstr("has shut down"));
}

INSTANTIATE_TEST_SUITE_P(Ext4AndXfs, FilesystemShutdownTest, ::testing::Values("ext4", "xfs"));

}  // namespace
}  // namespace stagehand::mounter

#include "mounter/filesystem_health.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::mounter {
namespace {

using ::testing::HasSubstr;

MountInfo Ext4(std::string fs_options) {
  MountInfo m;
  m.source = "/dev/loop7";
  m.target = "/var/lib/kubelet/plugins/x/globalmount";
  m.fstype = "ext4";
  m.options = "rw,relatime";
  m.fs_options = std::move(fs_options);
  return m;
}

class FilesystemHealthTest : public ::testing::Test {
 protected:
  void SetErrors(const std::string& count) {
    ASSERT_TRUE(MakeDirs(dir_.path() + "/fs/ext4/loop7", 0755).ok());
    ASSERT_TRUE(
        WriteFileAtomically(dir_.path() + "/fs/ext4/loop7/errors_count", count + "\n", 0644).ok());
  }

  stagehand::testing::TempDir dir_;
};

TEST_F(FilesystemHealthTest, AHealthyExt4IsFine) {
  SetErrors("0");
  EXPECT_FALSE(CheckFilesystem(Ext4("rw,errors=continue"), true, dir_.path()).has_value());
}

TEST_F(FilesystemHealthTest, EmergencyReadOnlyIsAFailureThoughTheMountSaysRw) {
  auto p = CheckFilesystem(Ext4("rw,errors=remount-ro,emergency_ro"), true, dir_.path());
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->failed);
  EXPECT_THAT(p->message, HasSubstr("emergency_ro"));
  EXPECT_THAT(p->message, HasSubstr("restart the pods"));
  // Also on a volume mounted read-only on purpose: it cannot be read reliably either.
  EXPECT_TRUE(CheckFilesystem(Ext4("ro,emergency_ro"), false, dir_.path()).has_value());
}

TEST_F(FilesystemHealthTest, AShutDownExt4IsAFailure) {
  auto problem = CheckFilesystem(Ext4("rw,shutdown"), /*mounted_writable=*/true, dir_.path());
  ASSERT_TRUE(problem.has_value());
  EXPECT_TRUE(problem->failed);
  EXPECT_THAT(problem->message, HasSubstr("shut down"));
}

TEST_F(FilesystemHealthTest, AReadOnlySuperblockIsAFailureOnlyWhenMountedReadWrite) {
  auto p = CheckFilesystem(Ext4("ro,errors=remount-ro"), true, dir_.path());
  ASSERT_TRUE(p.has_value());
  EXPECT_TRUE(p->failed);
  EXPECT_FALSE(CheckFilesystem(Ext4("ro,noload"), false, dir_.path()).has_value());
}

TEST_F(FilesystemHealthTest, Ext4ErrorsSinceTheLastCheckAreReported) {
  SetErrors("3");
  auto p = CheckFilesystem(Ext4("rw"), true, dir_.path());
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(p->failed);
  EXPECT_THAT(p->message, HasSubstr("3 error(s)"));
}

TEST_F(FilesystemHealthTest, NoCounterOrAnotherFilesystemIsNotAProblem) {
  EXPECT_FALSE(CheckFilesystem(Ext4("rw"), true, dir_.path()).has_value());
  SetErrors("garbage");
  EXPECT_FALSE(CheckFilesystem(Ext4("rw"), true, dir_.path()).has_value());
  MountInfo xfs = Ext4("rw,attr2");
  xfs.fstype = "xfs";
  SetErrors("5");
  EXPECT_FALSE(CheckFilesystem(xfs, true, dir_.path()).has_value());
}

}  // namespace
}  // namespace stagehand::mounter

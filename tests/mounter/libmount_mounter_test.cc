// Hermetic tests of LibmountMounter: mount-table parsing from a fixture file and argument
// validation that fails before any system call. Real mounts are in the integration tests.

#include "mounter/libmount_mounter.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "tests/testing/status_matchers.h"

namespace stagehand::mounter {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::Contains;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::Optional;
using ::testing::SizeIs;

// The tmpfs (id 101) is stacked on the ext4 (id 100) at the same target, but listed first, so
// order alone would pick the wrong one. 102 is a device node bind-mounted onto a file.
constexpr std::string_view kMountInfo =
    "21 26 0:20 / /proc rw,relatime - proc proc rw\n"
    "26 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n"
    "101 100 0:50 / /var/lib/sh/mnt ro,nosuid - tmpfs tmpfs rw,size=4k\n"
    "100 26 7:3 / /var/lib/sh/mnt rw,noatime - ext4 /dev/loop3 rw\n"
    "102 26 0:6 /loop3 /pods/p1/dev ro,nosuid,nodev - devtmpfs udev rw,size=10k\n"
    "103 26 0:60 / /with\\040space rw,relatime - tmpfs tmpfs rw\n";

class LibmountMounterTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/sh-mountinfo-XXXXXX";
    const int fd = mkstemp(tmpl.data());
    ASSERT_GE(fd, 0);
    close(fd);
    path_ = std::move(tmpl);
    ASSERT_THAT(WriteFileAtomically(path_, kMountInfo, 0644), IsOk());
  }

  void TearDown() override {
    if (!path_.empty()) {
      unlink(path_.c_str());
    }
  }

  std::string path_;
};

TEST_F(LibmountMounterTableTest, ListParsesEveryLine) {
  LibmountMounter mounter(path_);

  absl::StatusOr<std::vector<MountInfo>> mounts = mounter.List();

  ASSERT_THAT(mounts, IsOk());
  ASSERT_THAT(*mounts, SizeIs(6));
  const MountInfo& dev = (*mounts)[4];
  EXPECT_EQ(dev.source, "udev");
  EXPECT_EQ(dev.target, "/pods/p1/dev");
  EXPECT_EQ(dev.fstype, "devtmpfs");
  EXPECT_EQ(dev.root, "/loop3");
  EXPECT_THAT(dev.options, HasSubstr("nosuid"));
  EXPECT_THAT(dev.options, HasSubstr("size=10k"));
  EXPECT_THAT(*mounts, Contains(Field(&MountInfo::target, "/with space")));
}

TEST_F(LibmountMounterTableTest, FindReturnsTheTopmostOfStackedMounts) {
  LibmountMounter mounter(path_);

  absl::StatusOr<std::optional<MountInfo>> top = mounter.Find("/var/lib/sh/mnt");

  ASSERT_THAT(top, IsOk());
  EXPECT_THAT(*top, Optional(Field(&MountInfo::fstype, "tmpfs")));
}

TEST_F(LibmountMounterTableTest, FindUnescapesTargets) {
  LibmountMounter mounter(path_);

  EXPECT_THAT(mounter.Find("/with space").value(), Optional(Field(&MountInfo::fstype, "tmpfs")));
}

TEST_F(LibmountMounterTableTest, FindOfUnmountedPathIsNullopt) {
  LibmountMounter mounter(path_);

  EXPECT_EQ(mounter.Find("/var/lib/sh").value(), std::nullopt);
  EXPECT_EQ(mounter.Find("/var/lib/sh/mnt/").value(), std::nullopt);  // Exact match only.
}

TEST(LibmountMounterTest, UnreadableTableIsUnavailable) {
  LibmountMounter mounter("/nonexistent/mountinfo");

  EXPECT_THAT(mounter.List(), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(mounter.Find("/"), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(LibmountMounterTest, ListsTheRealTableWithARoot) {
  LibmountMounter mounter;

  absl::StatusOr<std::vector<MountInfo>> mounts = mounter.List();

  ASSERT_THAT(mounts, IsOk());
  EXPECT_THAT(*mounts, Contains(Field(&MountInfo::target, "/")));
}

TEST(LibmountMounterTest, MountValidatesTheRequest) {
  LibmountMounter mounter("/nonexistent/mountinfo");  // Validation comes before any I/O.
  constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

  EXPECT_THAT(mounter.Mount({"/dev/sdz", "relative/dir", "ext4", {}}), StatusIs(kInvalid));
  EXPECT_THAT(mounter.Mount({"/dev/sdz", "/a/../b", "ext4", {}}), StatusIs(kInvalid));
  EXPECT_THAT(mounter.Mount({"/dev/sdz", "/mnt/x", "", {}}), StatusIs(kInvalid));
  EXPECT_THAT(mounter.Mount({"", "/mnt/x", "ext4", {}}), StatusIs(kInvalid));
  EXPECT_THAT(mounter.Mount({"/dev/sdz", "/mnt/x", "ext4", {"ro,suid"}}), StatusIs(kInvalid));
}

TEST(LibmountMounterTest, BindAndUnmountValidateArguments) {
  LibmountMounter mounter("/nonexistent/mountinfo");
  constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

  EXPECT_THAT(mounter.Bind("src", "/mnt/x", false, {}), StatusIs(kInvalid));
  EXPECT_THAT(mounter.Bind("/src", "/mnt/x/", false, {}), StatusIs(kInvalid));
  EXPECT_THAT(mounter.Bind("/src", "/mnt/x", true, {"rw"}), StatusIs(kInvalid));
  EXPECT_THAT(mounter.Unmount(""), StatusIs(kInvalid));
  EXPECT_THAT(mounter.Unmount("mnt/x"), StatusIs(kInvalid));
}

}  // namespace
}  // namespace stagehand::mounter

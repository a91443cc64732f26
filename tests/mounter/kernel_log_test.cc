// Reading what the kernel said about a device: the record format of /dev/kmsg and device names.

#include "mounter/kernel_log.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include "tests/testing/temp_dir.h"

namespace stagehand::mounter {
namespace {

TEST(KernelLogTest, ARecordsTextIsItsMessageWithoutPrefixOrDictionary) {
  EXPECT_EQ(KernelLogWindow::RecordText(
                "3,1234,56789,-;XFS (loop3): Filesystem has duplicate UUID 1-2 - can't mount\n"
                " SUBSYSTEM=block\n DEVICE=b7:3\n"),
            "XFS (loop3): Filesystem has duplicate UUID 1-2 - can't mount");
  EXPECT_EQ(KernelLogWindow::RecordText("6,1,2,-;a; b\n"), "a; b");
  EXPECT_EQ(KernelLogWindow::RecordText("no separator"), "");
}

TEST(KernelLogTest, TheKernelNameIsThatOfWhatAPathResolvesTo) {
  testing::TempDir dir;
  const std::string link = dir.path() + "/ip-127.0.0.1:3260-iscsi-lun-1";
  ASSERT_EQ(symlink("/dev/null", link.c_str()), 0);

  EXPECT_EQ(KernelLogWindow::KernelName(link), "null");
  EXPECT_EQ(KernelLogWindow::KernelName("/dev/no-such-device"), "no-such-device");
}

}  // namespace
}  // namespace stagehand::mounter

// A loop device attached from another mount namespace, as the agent's previous container did in
// Kubernetes: the kernel then shows its backing file only as the path within the file's mount
// ("/lun"), and unstage from the new container must still find and detach it (it did not, and
// every volume staged before a DaemonSet restart left its loop device behind).

#include <fcntl.h>
#include <linux/loop.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <string>

#include <absl/cleanup/cleanup.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "testbed/stagehand_daemon.h"
#include "transport/userspace/loop_device.h"

namespace stagehand::testing {
namespace {

// In a child with its own mount namespace: a private tmpfs at `mnt`, a 4 MiB file `lun` on it,
// a loop device over that file. The loop keeps the file (and its mount) alive after the child
// exits. Returns "/dev/loopN", or "" on failure.
std::string AttachFromAnotherNamespace(const std::string& mnt) {
  int out[2];
  if (pipe(out) != 0) {
    return "";
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(out[0]);
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) ||
        mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=8m") != 0) {
      _exit(1);
    }
    const std::string file = mnt + "/lun";
    const int fd = open(file.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, 4 << 20) != 0) {
      _exit(1);
    }
    close(fd);
    auto device = transport::userspace::AttachLoopDevice(file, 512);
    if (!device.ok()) {
      _exit(1);
    }
    (void)!write(out[1], device->data(), device->size());
    _exit(0);
  }
  close(out[1]);
  std::array<char, 64> buf{};
  const ssize_t n = pid > 0 ? read(out[0], buf.data(), buf.size() - 1) : -1;
  close(out[0]);
  int status = 0;
  if (pid > 0) {
    waitpid(pid, &status, 0);
  }
  return n > 0 ? std::string(buf.data(), static_cast<size_t>(n)) : "";
}

TEST(LoopDeviceNamespaceTest, ALoopAttachedInAnotherMountNamespaceIsFoundAndDetached) {
  if (!testbed::IntegrationEnabled()) {
    GTEST_SKIP() << "integration test: needs root and SH_INTEGRATION=1";
  }
  const std::string root = testbed::MakeTempRoot();
  ASSERT_FALSE(root.empty());
  const std::string mnt = root + "/mnt";
  ASSERT_TRUE(MakeDirs(mnt, 0700).ok());
  const std::string file = mnt + "/lun";

  const std::string device = AttachFromAnotherNamespace(mnt);
  ASSERT_FALSE(device.empty());
  absl::Cleanup detach = [&device] {  // Whatever the test found: leave no loop device behind.
    const int fd = open(device.c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
      (void)ioctl(fd, LOOP_CLR_FD, 0);
      close(fd);
    }
  };
  // Seen from here, the backing file is only its path within the child's (unreachable) mount.
  EXPECT_EQ(transport::userspace::LoopBackingFile(device).value_or(""), "/lun");

  // Another file whose path ends the same way is not this device's.
  EXPECT_TRUE(transport::userspace::DetachLoopDevice(device, root + "/elsewhere/lun").ok());
  EXPECT_TRUE(transport::userspace::LoopBackingFile(device).has_value())
      << "detached a device it did not own";
  auto none = transport::userspace::FindLoopDevice(root + "/elsewhere/lun");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  auto found = transport::userspace::FindLoopDevice(file);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->value_or(""), device);
  EXPECT_TRUE(transport::userspace::DetachLoopDevice(device, file).ok());
  EXPECT_FALSE(transport::userspace::LoopBackingFile(device).has_value())
      << device << " is still attached";

  testbed::ForceCleanup(root);
}

}  // namespace
}  // namespace stagehand::testing

#include "mounter/filesystem_health.h"

#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <memory>

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "mounter/mount_options.h"

namespace stagehand::mounter {
namespace {

// The kernel's name of the block device `source` ("loop3", "dm-2"), or "" when it is not a
// device node. realpath(3) of a /dev node reads only /dev, never the device.
std::string KernelDeviceName(const std::string& source) {
  if (!absl::StartsWith(source, "/dev/")) {
    return "";
  }
  std::unique_ptr<char, decltype(&free)> real(realpath(source.c_str(), nullptr), &free);
  const std::string path = real != nullptr ? std::string(real.get()) : source;
  return path.substr(path.rfind('/') + 1);
}

// ext4's count of errors since the filesystem was last checked (kept in its superblock), or 0.
int64_t Ext4ErrorCount(const std::string& sysfs, const std::string& device) {
  if (device.empty()) {
    return 0;
  }
  auto text = ReadFileToString(JoinPath(sysfs, absl::StrCat("fs/ext4/", device, "/errors_count")));
  int64_t count = 0;
  if (!text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &count)) {
    return 0;
  }
  return count;
}

}  // namespace

std::optional<FilesystemProblem> CheckFilesystem(const MountInfo& mount, bool mounted_writable,
                                                 const std::string& sysfs) {
  // ext4 shut down (EXT4_IOC_SHUTDOWN, or the journal device gone) says so in its superblock
  // options; xfs says nothing anywhere, but refuses even a stat of its root (an in-memory inode:
  // no I/O, nothing to hang on) with EIO once it has shut down.
  struct stat st {};

  const bool xfs_shut_down =
      mount.fstype == "xfs" && stat(mount.target.c_str(), &st) != 0 && errno == EIO;
  if (HasMountOption(mount.fs_options, "shutdown") || xfs_shut_down) {
    return FilesystemProblem{
        true,
        absl::StrCat("the ", mount.fstype, " filesystem on ", mount.source,
                     " has shut down after errors: every access fails with EIO; restart the pods "
                     "that use it, so that it is unstaged, checked and staged again")};
  }
  if (HasMountOption(mount.fs_options, "emergency_ro")) {
    return FilesystemProblem{
        true,
        absl::StrCat("the ", mount.fstype, " filesystem on ", mount.source,
                     " shut itself down after I/O errors (emergency_ro): every write fails with "
                     "EROFS; restart the pods that use it, so that it is unstaged, checked and "
                     "staged again")};
  }
  if (mounted_writable && HasMountOption(mount.fs_options, "ro")) {
    return FilesystemProblem{
        true,
        absl::StrCat("the ", mount.fstype, " filesystem on ", mount.source,
                     " was mounted read-write and the kernel made it read-only after errors; "
                     "restart the pods that use it, so that it is unstaged, checked and staged "
                     "again")};
  }
  if (mount.fstype == "ext4") {
    if (const int64_t errors = Ext4ErrorCount(sysfs, KernelDeviceName(mount.source)); errors > 0) {
      return FilesystemProblem{
          false,
          absl::StrCat("ext4 on ", mount.source, " recorded ", errors,
                       " error(s) since it was last checked (see dmesg); it is checked when it "
                       "is staged again")};
    }
  }
  return std::nullopt;
}

}  // namespace stagehand::mounter

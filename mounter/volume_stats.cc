#include "mounter/volume_stats.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>

#include <absl/strings/str_cat.h>

#include "base/unique_fd.h"

namespace stagehand::mounter {

absl::StatusOr<FsStats> StatFilesystem(const std::string& path) {
  struct statvfs vfs = {};
  if (statvfs(path.c_str(), &vfs) != 0) {
    return ErrnoStatus(errno, absl::StrCat("statvfs '", path, "'"));
  }
  const auto frsize = static_cast<int64_t>(vfs.f_frsize);
  FsStats s;
  s.capacity_bytes = static_cast<int64_t>(vfs.f_blocks) * frsize;
  s.available_bytes = static_cast<int64_t>(vfs.f_bavail) * frsize;
  s.used_bytes = static_cast<int64_t>(vfs.f_blocks - vfs.f_bfree) * frsize;
  s.inodes = static_cast<int64_t>(vfs.f_files);
  s.inodes_free = static_cast<int64_t>(vfs.f_ffree);
  s.inodes_used = static_cast<int64_t>(vfs.f_files - vfs.f_ffree);
  s.read_only = (vfs.f_flag & ST_RDONLY) != 0;
  return s;
}

absl::StatusOr<int64_t> BlockDeviceSize(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open '", path, "'"));
  }

  struct stat st = {};
  if (fstat(fd.Get(), &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat("fstat '", path, "'"));
  }
  if (S_ISREG(st.st_mode)) {
    return static_cast<int64_t>(st.st_size);
  }
  if (!S_ISBLK(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is neither a block device nor a regular file"));
  }
  uint64_t bytes = 0;
  if (ioctl(fd.Get(), BLKGETSIZE64, &bytes) != 0) {
    return ErrnoStatus(errno, absl::StrCat("BLKGETSIZE64 '", path, "'"));
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace stagehand::mounter

#pragma once

// Capacity and usage of a mounted filesystem, and the size of a block device.

#include <cstdint>
#include <string>

#include "base/status.h"

namespace stagehand::mounter {

struct FsStats {
  int64_t capacity_bytes = 0;   // Total data blocks.
  int64_t available_bytes = 0;  // Free to unprivileged users (excludes reserved blocks).
  int64_t used_bytes = 0;       // Total minus free (so reserved blocks count as neither).
  int64_t inodes = 0;
  int64_t inodes_free = 0;
  int64_t inodes_used = 0;
  bool read_only = false;  // ST_RDONLY: the mount (or its superblock) is read-only.
};

// statvfs(3) of the filesystem that contains `path`.
// NotFound: `path` does not exist.
absl::StatusOr<FsStats> StatFilesystem(const std::string& path);

// Size in bytes of the block device `path` (BLKGETSIZE64); for a regular file, its length.
// NotFound: `path` does not exist. InvalidArgument: neither a block device nor a regular file.
absl::StatusOr<int64_t> BlockDeviceSize(const std::string& path);

}  // namespace stagehand::mounter

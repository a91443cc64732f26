#pragma once

// Whether a mounted filesystem still takes I/O, from what the kernel says of it without touching
// the filesystem: its superblock options in the mount table (ext4's `emergency_ro` after it
// aborted its journal, a read-only remount after errors) and ext4's error counter in sysfs.
// statvfs(3) shows neither: ST_RDONLY stays clear under `emergency_ro`.

#include <optional>
#include <string>

#include "mounter/mounter.h"

namespace stagehand::mounter {

struct FilesystemProblem {
  std::string reason;   // CamelCase: "FilesystemFailed", "FilesystemErrors".
  std::string message;  // What happened and what to do, for a person.
};

// The worst problem of the filesystem mounted at `mount`, or nullopt when it looks fine.
// `mounted_writable`: it was mounted read-write (a read-only superblock is then a failure).
// `sysfs` is the sysfs root ("/sys"; tests pass a tree of their own).
std::optional<FilesystemProblem> CheckFilesystem(const MountInfo& mount, bool mounted_writable,
                                                 const std::string& sysfs = "/sys");

}  // namespace stagehand::mounter

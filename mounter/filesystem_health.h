#pragma once

// Whether a mounted filesystem still takes I/O, from what the kernel says of it without touching
// the device: its superblock options in the mount table (ext4's `emergency_ro` after it aborted
// its journal, `shutdown`, a read-only remount after errors), ext4's error counter in sysfs, and
// for xfs, which shows a shutdown nowhere else, a stat(2) of its root. statvfs(3) shows none of
// these: ST_RDONLY stays clear under `emergency_ro`, and statvfs of a shut-down xfs succeeds.

#include <optional>
#include <string>

#include "mounter/mounter.h"

namespace stagehand::mounter {

struct FilesystemProblem {
  // True: it failed (shut down, aborted, made read-only): accesses or writes fail until it is
  // checked. False: it recorded errors and still works.
  bool failed = false;
  std::string message;  // What happened and what to do, for a person.
};

// The worst problem of the filesystem mounted at `mount`, or nullopt when it looks fine.
// `mounted_writable`: it was mounted read-write (a read-only superblock is then a failure).
// `sysfs` is the sysfs root ("/sys"; tests pass a tree of their own).
std::optional<FilesystemProblem> CheckFilesystem(const MountInfo& mount, bool mounted_writable,
                                                 const std::string& sysfs = "/sys");

}  // namespace stagehand::mounter

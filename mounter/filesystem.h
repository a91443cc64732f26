#pragma once

// Creating, checking and growing filesystems with the distribution's tools (e2fsprogs,
// xfsprogs), run without a shell and with a deadline. Only "ext4" and "xfs" are supported.
// All functions block until the tool exits; they are thread-safe.

#include <string>
#include <string_view>

#include "base/status.h"

namespace stagehand::mounter {

// True for the filesystem types these functions support: "ext4" and "xfs".
bool IsSupportedFsType(std::string_view fstype);

// Creates an `fstype` filesystem on `device`, without discarding blocks. The caller must have
// decided that the device may be formatted (see `DecideFormat`); as a second safety net
// mkfs.xfs runs without -f and so refuses to overwrite an existing signature.
// InvalidArgument: unsupported `fstype`, or `device` is not an absolute path.
// Internal: the tool failed; the message carries its output.
// DeadlineExceeded: the tool ran too long and was killed.
absl::Status Format(const std::string& device, std::string_view fstype);

// Checks and, where safe, repairs the unmounted filesystem on `device` before it is mounted:
// `e2fsck -p` for ext4, nothing for xfs (its log is replayed at mount time).
// FailedPrecondition: e2fsck found errors it could not fix without a human, or could not run on
// the device (e.g. because it is mounted). InvalidArgument as for `Format`.
absl::Status Check(const std::string& device, std::string_view fstype);

// Grows the filesystem to fill its (already enlarged) device: `resize2fs <device>` for ext4
// (mounted or not), `xfs_growfs <mount_path>` for xfs (must be mounted at `mount_path`).
// InvalidArgument as for `Format`. Internal: the tool failed.
absl::Status Grow(const std::string& device, const std::string& mount_path,
                  std::string_view fstype);

}  // namespace stagehand::mounter

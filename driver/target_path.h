#pragma once

// The checks and file operations on the paths a CSI caller hands the node service (staging and
// publish targets), in one place: what the syscalls say about a path, and what stagehand may
// create or remove there. Nothing here mounts.

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "driver/staged_volume.h"

namespace stagehand::driver {

// Anything at `path`, a dangling symbolic link included.
bool PathExists(const std::string& path);

// InvalidArgument when `path` could lead elsewhere than it says: its parent does not exist or
// resolves through a symbolic link, or `path` itself is a symbolic link. `field` names it.
absl::Status CheckParentIsReal(const std::string& path, std::string_view field);

// FailedPrecondition when publishing at `path` would hide something: a directory that is not
// empty, or a file with data (block); also a target of the wrong type. Absent is fine.
absl::Status CheckTargetEmpty(const std::string& path, bool block);

// InvalidArgument when `target` lies inside, or contains, any of `volumes`' staging paths or
// publish targets (`volume_id`'s own publish at `target`, a repeat, aside).
absl::Status CheckNoOverlap(const std::vector<StagedVolume>& volumes, const std::string& volume_id,
                            const std::string& target);

// The empty file a block volume is bound onto; an existing file is kept as it is.
absl::Status CreateBlockTarget(const std::string& path);

// Removes what a publish made at its (unmounted) target: an empty directory, or the empty
// regular file of a block publish. Anything else there (files written into the directory after
// the unmount, a file with data) is not ours to delete and is left, with a warning, so that a
// teardown never wedges on it either.
absl::Status RemoveTarget(const std::string& path);

}  // namespace stagehand::driver

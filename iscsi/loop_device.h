#pragma once

// Loop devices over the FUSE-served LUN file: the block device that gets formatted and mounted.

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace stagehand::iscsi {

// Attaches `file` to a free loop device with direct I/O (no double caching; see
// shared/notes/userspace-datapath.md) and a logical block size of `block_size`.
// Returns "/dev/loopN". Unavailable when no loop device can be had.
absl::StatusOr<std::string> AttachLoopDevice(const std::string& file, uint32_t block_size);

// Detaches `device` if it is still backed by `expected_backing_file`. OK when the device is
// already detached or now backs something else (it was ours and is gone).
absl::Status DetachLoopDevice(const std::string& device, const std::string& expected_backing_file);

// Makes `device` pick up a new size of its backing file (LOOP_SET_CAPACITY).
absl::Status RefreshLoopCapacity(const std::string& device);

// The loop device currently backed by `file`, if any.
absl::StatusOr<std::optional<std::string>> FindLoopDevice(const std::string& file);

// The backing file of `device` ("/dev/loop3"), or nullopt when it is not attached.
std::optional<std::string> LoopBackingFile(const std::string& device);

}  // namespace stagehand::iscsi

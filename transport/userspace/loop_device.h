#pragma once

// Loop devices over the FUSE-served LUN file: the block device that gets formatted and mounted.

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace stagehand::transport::userspace {

// Attaches `file` to a free loop device with direct I/O (no double caching) and a logical
// block size of `block_size`; with `read_only` the device refuses writes (LO_FLAGS_READ_ONLY)
// and the file is opened read-only. Returns "/dev/loopN". Unavailable when no loop device can
// be had.
absl::StatusOr<std::string> AttachLoopDevice(const std::string& file, uint32_t block_size,
                                             bool read_only = false);

// Detaches `device` if it is still backed by `expected_backing_file`, also when another mount
// namespace attached it (the kernel then shows only the path within the file's mount; the name
// recorded at attach time settles it). OK when the device is already detached or now backs
// something else (it was ours and is gone). FailedPrecondition, naming who has it open where it
// can, when it stays attached because something else still uses it (the kernel then detaches
// it at its last close).
absl::Status DetachLoopDevice(const std::string& device, const std::string& expected_backing_file);

// Makes `device` pick up a new size of its backing file (LOOP_SET_CAPACITY).
absl::Status RefreshLoopCapacity(const std::string& device);

// The loop device currently backed by `file`, if any (attached from any mount namespace, as
// DetachLoopDevice matches it).
absl::StatusOr<std::optional<std::string>> FindLoopDevice(const std::string& file);

// The backing file of `device` ("/dev/loop3"), or nullopt when it is not attached.
std::optional<std::string> LoopBackingFile(const std::string& device);

// Whether `device` still serves `file`, from sysfs and the device's own status (never I/O).
enum class LoopAttachment {
  kAttached,
  // Detached (losetup -d) while in use: it serves until its last user closes it, then it is
  // gone. stagehand never sets autoclear, so someone else did this.
  kDetaching,
  kGone,  // Not attached, or attached to another file.
};
LoopAttachment CheckLoopAttachment(const std::string& device, const std::string& file);

// What the block layer says of a loop device's requests (sysfs; never touches the device).
struct LoopActivity {
  uint64_t in_flight = 0;  // Reads and writes issued and not completed.
  uint64_t completed = 0;  // Reads, writes, discards and flushes completed since it was set up.
};

// nullopt when the device is gone.
std::optional<LoopActivity> ReadLoopActivity(const std::string& device);

}  // namespace stagehand::transport::userspace

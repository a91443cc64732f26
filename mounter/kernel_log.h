#pragma once

// What the kernel logged about a device while we did something to it: why a mount failed
// ("XFS (loop3): Filesystem has duplicate UUID … - can't mount"), which the mount(2) error
// (EINVAL) and libmount's generic text ("wrong fs type, bad option, bad superblock") never say.
// Read from /dev/kmsg (needs CAP_SYSLOG when kernel.dmesg_restrict is set; root has it).

#include <string>
#include <vector>

#include "base/unique_fd.h"

namespace stagehand::mounter {

class KernelLogWindow {
 public:
  // Starts at the end of the kernel log. Without a readable /dev/kmsg (a container without it),
  // the window is always empty.
  static KernelLogWindow Open();

  // The messages logged since Open() that name `device` the way filesystems and the block
  // layer do: its kernel name ("loop3", "sdb", "dm-2", resolved through symlinks) in
  // parentheses or followed by a colon. Oldest first, at most `max` (the latest ones).
  // Consumes what it read: a second call sees only later messages.
  std::vector<std::string> MessagesAbout(const std::string& device, size_t max = 4);

  // The kernel's name for `device`: the last component of the path it resolves to.
  static std::string KernelName(const std::string& device);

  // The text of one /dev/kmsg record ("6,1234,5678,-;XFS (loop3): Mounting V5\n KEY=v"): the
  // message after ';' up to the first newline; empty for a malformed record.
  static std::string RecordText(std::string_view record);

 private:
  explicit KernelLogWindow(UniqueFd fd) : fd_(std::move(fd)) {}

  UniqueFd fd_;
};

}  // namespace stagehand::mounter

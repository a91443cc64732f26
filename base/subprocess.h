#pragma once

// Runs an external program (mkfs, fsck, resize2fs, ...) from an argv array, never through a
// shell, with a deadline.

#include <chrono>
#include <string>
#include <vector>

#include "base/status.h"

namespace stagehand {

struct ProcessResult {
  int exit_code = -1;  // Exit status; 128 + signal number when killed by a signal.
  std::string output;  // stdout and stderr interleaved, truncated to 64 KiB.
};

struct RunOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(2)};
};

// Runs `argv` (argv[0] looked up in PATH) with stdin on /dev/null and waits for it.
// Returns the exit code and output whatever the exit code is.
// InvalidArgument: empty argv. NotFound: the program does not exist.
// DeadlineExceeded: the program ran past the timeout (it is killed with SIGKILL).
// Thread-safe.
absl::StatusOr<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                         const RunOptions& options = {});

// Formats an argv for messages: "mkfs.ext4 -F /dev/loop3".
std::string ArgvToString(const std::vector<std::string>& argv);

}  // namespace stagehand

#pragma once

// An exclusive lock on a file that lives as long as the returned descriptor, or the process: a
// second stagehand on the same state directory or socket refuses to start instead of stealing
// either.

#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace stagehand {

// Creates `path` (0600) when needed and locks it. FailedPrecondition, saying to stop the other
// one, when another process holds it.
//
// A POSIX record lock, not a flock: it is the process's and never inherited, so the lock of an
// agent that died is free at once. A flock belongs to the open file, which the processes the
// agent was starting (between fork and exec) still held for some milliseconds: an agent
// restarted right after a SIGKILL then found its own old lock taken.
absl::StatusOr<UniqueFd> LockFile(const std::string& path);

}  // namespace stagehand

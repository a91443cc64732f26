#pragma once

// The body of a userspace session process: `stagehand __session` re-executed by the
// userspace transport. It reads a SessionConfig (with secrets) from `config_fd`, logs in,
// checks the LUN identity, serves the LUN on a FUSE mount, writes one SessionStatus to
// `ready_fd` (then closes it), and keeps serving until SIGTERM/SIGINT. Every later state change
// is written to <runtime_dir>/status (mode 0600, atomically).

namespace stagehand::iscsi {

// Returns the process exit code: 0 after a clean stop, 1 when it could not start (the reason is
// in the status written to `ready_fd`).
int RunSessionProcess(int config_fd, int ready_fd);

}  // namespace stagehand::iscsi

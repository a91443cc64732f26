#pragma once

// The body of a userspace session process (`stagehand-session`, or `stagehand __session`) started
// by the userspace transport with the config pipe on stdin and the ready pipe on stdout (the
// only descriptors a systemd unit can be handed). It reads a SessionConfig (with secrets) from
// `config_fd`, logs in, checks the LUN identity, serves the LUN on a FUSE mount, writes one
// SessionStatus to `ready_fd` (then points it at /dev/null), and keeps serving until
// SIGTERM/SIGINT. Every later state change is written to <runtime_dir>/status (mode 0600,
// atomically).

#include <optional>
#include <string>
#include <string_view>

namespace stagehand::iscsi {

// The first status travels over the ready pipe framed: a 4-byte little-endian length, then the
// serialized SessionStatus. systemd keeps its own copy of a unit's stdout for the unit's lifetime,
// so the reader cannot wait for end-of-file.
std::string FrameReadyMessage(std::string_view serialized_status);

// The serialized status once `buffer` holds a whole frame; nullopt while it does not.
std::optional<std::string> UnframeReadyMessage(std::string_view buffer);

// Returns the process exit code: 0 after a clean stop, 1 when it could not start (the reason is
// in the status written to `ready_fd`).
int RunSessionProcess(int config_fd, int ready_fd);

}  // namespace stagehand::iscsi

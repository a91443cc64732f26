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
#include <vector>

namespace stagehand::iscsi {

// The first status travels over the ready pipe framed: a 4-byte little-endian length, then the
// serialized SessionStatus. systemd keeps its own copy of a unit's stdout for the unit's lifetime,
// so the reader cannot wait for end-of-file.
std::string FrameReadyMessage(std::string_view serialized_status);

// The serialized status once `buffer` holds a whole frame; nullopt while it does not.
std::optional<std::string> UnframeReadyMessage(std::string_view buffer);

// Exit statuses: 0 after a clean stop (SIGTERM), 1 when it could not start or take over (the
// reason is in the status written to `ready_fd`), kExitFuseAborted when the kernel ended the
// FUSE connection. A manager restarts the process only when it dies of a signal or misses its
// watchdog: an exit status is the process's own decision.
inline constexpr int kExitFuseAborted = 2;

// Set by the session keeper in the environment of the process it keeps: the keeper's pid.
inline constexpr char kKeeperVariable[] = "STAGEHAND_SESSION_KEEPER";

// A first start reads its config from `config_fd` and writes its first status to `ready_fd`.
// Started by a manager with a "handover" and a "fuse" descriptor ($LISTEN_FDS: what an earlier
// process left with the manager before it died), it takes that process's place instead: same
// FUSE connection, a new login to the same LUN (FuseLunServer::Adopt). Returns the exit status.
int RunSessionProcess(int config_fd, int ready_fd);

// The session binary's entry (`stagehand-session`, `stagehand __session`), with the arguments
// after the role word: none, the session process on stdin/stdout; `--keeper
// [--watchdog-ms=N]`, the keeper of such a process (base/service_keeper.h) where systemd does
// not run it: the keeper runs its own command line without `--keeper` and restarts it when it
// dies, with what it left (see above).
int SessionMain(const std::vector<std::string>& args);

}  // namespace stagehand::iscsi

#pragma once

// The body of a userspace session process (`stagehand-session`, or `stagehand __session`) started
// by the userspace transport with its config (a sealed memory file) on stdin and the ready pipe
// on stdout (the only descriptors a systemd unit can be handed). It reads a SessionConfig (with
// secrets) from `config_fd`, logs in, checks the LUN identity, serves the LUN on a FUSE mount,
// writes one SessionStatus to `ready_fd` (then points it at /dev/null), and keeps serving until
// SIGTERM/SIGINT. Every later state change is written to its status file (session/protocol.h).

#include <string>
#include <vector>

namespace stagehand::session {

// A first start reads its config from `config_fd` and writes its first status to `ready_fd`.
// Started by a manager with a "handover" and a "fuse" descriptor ($LISTEN_FDS: what an earlier
// process left with the manager before it died), it takes that process's place instead: same
// FUSE connection, a new login to the same LUN (FuseLunServer::Adopt). Returns the exit status.
int RunSessionProcess(int config_fd, int ready_fd);

// The session binary's entry (`stagehand-session`, `stagehand __session`), with the arguments
// after the role word: none, the session process on stdin/stdout; `--keeper
// [--watchdog-ms=N]`, the keeper of such a process (session/keeper.h) where systemd does
// not run it: the keeper runs its own command line without `--keeper` and restarts it when it
// dies, with what it left (see above).
int SessionMain(const std::vector<std::string>& args);

}  // namespace stagehand::session

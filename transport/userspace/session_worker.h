#pragma once

// Which process serves a userspace session now, and under which supervisor: read from the
// session's status file (session/protocol.h), which each process that takes the volume over
// rewrites, and from the record the transport made at attach.

#include <cstdint>
#include <optional>
#include <string>

#include "proto/state.pb.h"

namespace stagehand::transport::userspace {

// The process serving a session now: the one its status file names (a successor writes its own
// pid there when it takes over), else the one recorded at attach. pid 0 when none runs.
struct Worker {
  int pid = 0;
  uint64_t start_time = 0;
  std::optional<state::v1::SessionStatus> status;  // The status file, when readable.
};

Worker CurrentWorker(const state::v1::UserspaceSessionRecord& session);

// `session` with the supervisor the status file names: the last process to serve wrote it (a
// successor of an upgrade whose record was not saved yet, after a crash of the agent, runs
// under another unit or keeper than the record says).
state::v1::UserspaceSessionRecord WithCurrentSupervisor(
    state::v1::UserspaceSessionRecord session,
    const std::optional<state::v1::SessionStatus>& status);

// One session process's data path, for the stall detector (a new process is a new data path).
std::string StallKey(const state::v1::UserspaceSessionRecord& session, int pid);

}  // namespace stagehand::transport::userspace

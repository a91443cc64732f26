#pragma once

// How a userspace session process is started so that it outlives the agent, and the process
// after it: as a transient systemd unit (own cgroup, survives a restart or upgrade of the agent's
// service or pod; systemd keeps the descriptors the session leaves for a successor and restarts
// it when it dies), or where there is no systemd as a session keeper (base/service_keeper.h) that
// does the same, started detached (posix_spawn in a new session, through an intermediate process
// that exits at once so that it is reparented to init).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "proto/state.pb.h"

namespace stagehand::transport::userspace {

struct SessionLaunch {
  std::vector<std::string> argv;  // argv[0] is an absolute path.
  int stdin_fd = -1;              // The session reads its config (with secrets) from here.
  int stdout_fd = -1;             // The session writes its first status here.
  std::string unit_name;          // "stagehand-session-<id>.service" (systemd only).
  std::string description;        // One line for `systemctl status` (no secrets).
  // A process that sends no WATCHDOG=1 for this long (stopped, deadlocked) is killed and, like
  // one that died of a signal, started again: the successor takes over what it left
  // (session_process.h). 0: no watchdog.
  std::chrono::seconds watchdog{0};
};

class SessionLauncher {
 public:
  virtual ~SessionLauncher() = default;

  // Starts the process and returns once it was handed to its supervisor; readiness is reported
  // by the process itself on `stdout_fd`. The caller keeps ownership of the fds.
  virtual absl::Status Launch(const SessionLaunch& launch) = 0;

  // Stops whoever restarts the session of `session` (its unit, or its keeper), so that it is
  // not started again; the process itself gets SIGTERM. Returns once that is asked for: the
  // caller waits for the process. OK when there is none.
  virtual absl::Status StopSupervisor(const state::v1::UserspaceSessionRecord& session) = 0;

  // Whether someone still restarts the session of `session` when its process ends.
  virtual bool Supervised(const state::v1::UserspaceSessionRecord& session) = 0;

  // "systemd" or "detached", for logs and status.
  virtual std::string_view Name() const = 0;
};

std::unique_ptr<SessionLauncher> MakeDetachedLauncher();

// "stagehand-session-<12 hex>.service", derived from the session's runtime directory;
// "stagehand-session-<12 hex>-<generation>.service" for the processes of later upgrades.
std::string SessionUnitName(const std::string& runtime_dir, uint32_t generation = 0);

}  // namespace stagehand::transport::userspace

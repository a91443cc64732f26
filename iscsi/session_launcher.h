#pragma once

// How a userspace session process is started so that it outlives the agent: as a transient
// systemd unit (own cgroup, survives a restart or upgrade of the agent's service or pod), or as a
// detached process where there is no systemd (posix_spawn in a new session, through an
// intermediate process that exits at once so that it is reparented to init).

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace stagehand::iscsi {

struct SessionLaunch {
  std::vector<std::string> argv;  // argv[0] is an absolute path.
  int stdin_fd = -1;              // The session reads its config (with secrets) from here.
  int stdout_fd = -1;             // The session writes its first status here.
  std::string unit_name;          // "stagehand-session-<id>.service" (systemd only).
  std::string description;        // One line for `systemctl status` (no secrets).
};

class SessionLauncher {
 public:
  virtual ~SessionLauncher() = default;

  // Starts the process and returns once it was handed to its supervisor; readiness is reported
  // by the process itself on `stdout_fd`. The caller keeps ownership of the fds.
  virtual absl::Status Launch(const SessionLaunch& launch) = 0;

  // "systemd" or "detached", for logs and status.
  virtual std::string_view Name() const = 0;
};

std::unique_ptr<SessionLauncher> MakeDetachedLauncher();

// "stagehand-session-<12 hex>.service", derived from the session's runtime directory.
std::string SessionUnitName(const std::string& runtime_dir);

}  // namespace stagehand::iscsi

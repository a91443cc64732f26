#pragma once

// The `stagehand` daemon: the built-in driver's CSI Identity and Node services and its
// registration socket; standalone, also the plugin watcher, the reconciler and the manifest
// source; the agent API; metrics and probes; systemd notifications.

#include <memory>

#include "agent/daemon_options.h"
#include "base/status.h"

namespace stagehand::agent {

class Daemon {
 public:
  // Resolves and checks `options` (ResolveDaemonOptions), takes the state and socket locks and
  // starts every component; on failure, stops what it started. Blocks SIGTERM and SIGINT in the
  // calling thread before any other thread starts: call it from main's thread.
  static absl::StatusOr<std::unique_ptr<Daemon>> Create(DaemonOptions options);

  // Stops every component in order: metrics, calls in flight to drivers, the agent API, the
  // manifest source, the reconciler (waits for running operations), the plugin watcher, the
  // registration socket, the CSI server. Volumes stay staged and published.
  virtual ~Daemon() = default;

  // Serves until SIGTERM or SIGINT. Tells systemd READY=1 once the first reconcile is done (or
  // after 60 s), STATUS= when the summary changes, and WATCHDOG=1 while alive.
  virtual absl::Status Run() = 0;
};

// The process exit code for a status of Create or Run: 0 for OK, 2 for a usage or configuration
// error (InvalidArgument), 1 for anything else.
int ExitCode(const absl::Status& status);

}  // namespace stagehand::agent

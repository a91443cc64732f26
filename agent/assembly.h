#pragma once

// What the daemon runs in each mode, built from the components (the composition root's two
// halves):
// - Kubernetes (and a standalone agent with --no-watch-plugins): the built-in driver, its
//   registration socket for the kubelet, and what reports on it; the kubelet reconciles.
// - standalone: the same, plus the plugin watcher and registry, the reconciler and its
//   manifests, and the stats and health rounds; stagehand is the whole stack.
// Both run their timers and watches on the daemon's loop; the daemon owns the signals, the
// locks and systemd's notifications.

#include <cstdint>
#include <memory>

#include "agent/daemon_options.h"
#include "base/event_loop.h"
#include "base/status.h"
#include "status/agent_health.h"

namespace stagehand::agent {

// Stopping (destroying) an assembly stops every component in the order the data path needs;
// volumes stay staged and published.
class Assembly {
 public:
  virtual ~Assembly() = default;

  // How the agent stands (/readyz, STATUS=, the watchdog).
  virtual const status::AgentHealth& health() const = 0;

  // What was persisted has been reconciled once: READY=1 may go out.
  virtual bool Reconciled() const = 0;

  // Changes whenever something health() reports may have changed.
  virtual uint64_t Generation() const = 0;
};

// The assembly `options.mode` (and --watch-plugins) ask for, started. `loop` must outlive it.
absl::StatusOr<std::unique_ptr<Assembly>> StartAssembly(const DaemonOptions& options,
                                                        EventLoop& loop);

absl::StatusOr<std::unique_ptr<Assembly>> StartKubernetesAssembly(const DaemonOptions& options,
                                                                  EventLoop& loop);
absl::StatusOr<std::unique_ptr<Assembly>> StartStandaloneAssembly(const DaemonOptions& options,
                                                                  EventLoop& loop);

}  // namespace stagehand::agent

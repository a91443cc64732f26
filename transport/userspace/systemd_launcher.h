#pragma once

// Starts session processes as transient systemd services (systemd/unit_manager.h), so each lives
// in its own cgroup: stopping, restarting or upgrading the agent's service (or, in Kubernetes,
// its pod) does not kill the data path. The config and ready pipes are handed to systemd as the
// unit's stdin and stdout; stderr goes to the journal.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "systemd/unit_manager.h"
#include "transport/userspace/session_launcher.h"

namespace stagehand::transport::userspace {

struct SystemdLauncherOptions {
  // The bus systemd listens on (systemd::UnitManagerOptions::bus_address).
  std::string bus_address = systemd::kSystemBusAddress;
  std::chrono::seconds call_timeout{10};
  std::chrono::seconds stop_timeout{10};  // TimeoutStopSec of the units.
};

// Connects and checks that systemd answers on the bus. Unavailable (with the reason) otherwise.
absl::StatusOr<std::unique_ptr<transport::userspace::SessionLauncher>> ConnectSystemdLauncher(
    const SystemdLauncherOptions& options);

// `--session-launcher`: "systemd" (required: an error when systemd does not answer), "detached",
// or "auto" (systemd when it answers on the bus, else detached children).
absl::StatusOr<std::unique_ptr<transport::userspace::SessionLauncher>> MakeSessionLauncher(
    std::string_view choice, const SystemdLauncherOptions& options);

}  // namespace stagehand::transport::userspace

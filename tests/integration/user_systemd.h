#pragma once

// A real systemd service manager for integration tests on hosts where systemd is not PID 1: a
// private D-Bus bus and `systemd --user` (running as root) on it, inside a private mount
// namespace of the test process, where /run/systemd/system exists (systemd refuses to start
// otherwise). The manager implements the same D-Bus API as the system instance
// (StartTransientUnit, StopUnit, ...), so it stands in for the host's systemd.

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"

namespace stagehand::testing {

// Gives the calling process its own mount namespace (every mount private) with a tmpfs on
// /run/systemd holding system/. Call once, before any thread exists.
absl::Status EnterPrivateSystemdNamespace();

class UserSystemd {
 public:
  UserSystemd() = default;
  UserSystemd(const UserSystemd&) = delete;
  UserSystemd& operator=(const UserSystemd&) = delete;
  ~UserSystemd();

  // Starts dbus-daemon and `systemd --user` with their sockets under `dir` and waits for the
  // manager's READY=1 (sd_notify). Sets XDG_RUNTIME_DIR and DBUS_SESSION_BUS_ADDRESS in this
  // process so that `systemctl --user` talks to it.
  absl::Status Start(const std::string& dir);
  void Stop();

  std::string bus_address() const { return bus_address_; }

  // `systemctl --user <args...>`; returns its output, or an error with it on a non-zero exit.
  absl::StatusOr<std::string> Systemctl(const std::vector<std::string>& args) const;
  // Moves `pid` into a new scope unit `name` (as systemd does with a service's main process).
  absl::Status AdoptIntoScope(const std::string& name, pid_t pid) const;

 private:
  std::string bus_address_;
  pid_t dbus_pid_ = -1;
  pid_t systemd_pid_ = -1;
};

}  // namespace stagehand::testing

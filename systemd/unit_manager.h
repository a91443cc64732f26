#pragma once

// systemd's manager over D-Bus (sdbus-c++): starts transient services (StartTransientUnit).
// A unit started this way lives in its own cgroup, so it outlives whoever started it.
//
// Thread-safe: calls are serialised on one bus connection. A call that finds the connection
// gone (dbus or systemd restarted) connects once more and repeats itself once.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace stagehand::systemd {

inline constexpr char kSystemBusAddress[] = "unix:path=/run/dbus/system_bus_socket";

struct UnitManagerOptions {
  // The bus systemd listens on: the system bus, or in Kubernetes the host's system bus socket
  // mounted into the pod. A user manager's bus works too (tests use one).
  std::string bus_address = kSystemBusAddress;
  std::chrono::seconds call_timeout{10};
};

struct TransientService {
  std::string name;                       // "<something>.service".
  std::string description;                // One line for `systemctl status`.
  std::vector<std::string> argv;          // argv[0] is an absolute path.
  int stdin_fd = -1;                      // Handed to systemd; the caller keeps its copy.
  int stdout_fd = -1;                     // Likewise. stderr goes to the journal.
  std::chrono::seconds stop_timeout{10};  // TimeoutStopSec.
  int oom_score_adjust = 0;
  // Restarted when it dies of a signal or its watchdog runs out (Restart=on-abnormal), after
  // `restart_delay`, with what it left in its file descriptor store (FileDescriptorStoreMax=,
  // FDSTORE=1 from the main process, NotifyAccess=main). False: never restarted.
  bool restart_on_abnormal = false;
  std::chrono::milliseconds restart_delay{100};
  // Given up on after this many starts within 10 s (StartLimitBurst=; systemd's default is 5).
  unsigned start_limit_burst = 30;
  unsigned fd_store_max = 0;
  // WatchdogSec=; the process is killed with SIGKILL when it runs out. 0: none.
  std::chrono::seconds watchdog{0};
};

class UnitManager {
 public:
  // Connects and checks that systemd answers on the bus: Unavailable with the reason otherwise.
  static absl::StatusOr<std::unique_ptr<UnitManager>> Connect(UnitManagerOptions options);

  virtual ~UnitManager() = default;

  // Starts `service` (Type=exec: fails when the binary cannot be executed; collected once it
  // exits, failed or not). A failed unit of the same name that systemd still lists is reset
  // first; a running one is FailedPrecondition. Unavailable when systemd cannot be reached.
  virtual absl::Status StartTransientService(const TransientService& service) = 0;

  // Asks systemd to stop unit `name` (no restart after it, its file descriptor store dropped)
  // and returns: the caller waits for the process. OK when there is no such unit.
  virtual absl::Status StopUnit(const std::string& name) = 0;

  // The unit's ActiveState ("active", "activating" while it waits to be restarted, ...);
  // "inactive" when systemd has no such unit. Unavailable when systemd cannot be reached.
  virtual absl::StatusOr<std::string> ActiveState(const std::string& name) = 0;

  // systemd's version string, as read at connect.
  virtual std::string Version() const = 0;
};

}  // namespace stagehand::systemd

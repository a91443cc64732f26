#include "transport/userspace/systemd_launcher.h"

#include <utility>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "base/log.h"

namespace stagehand::transport::userspace {
namespace {

constexpr LogComponent kComponent = LogComponent::kSessions;

// The data path of mounted filesystems: the OOM killer should pick almost anything else.
constexpr int kSessionOomScoreAdjust = -900;

// The session leaves two descriptors for its successor (its handover and /dev/fuse); room for
// one replaced pair.
constexpr unsigned kSessionFdStoreMax = 4;

class SystemdLauncher final : public transport::userspace::SessionLauncher {
 public:
  SystemdLauncher(std::unique_ptr<systemd::UnitManager> units, std::chrono::seconds stop_timeout)
      : units_(std::move(units)), stop_timeout_(stop_timeout) {}

  absl::Status Launch(const transport::userspace::SessionLaunch& launch) override {
    if (launch.argv.empty() || launch.unit_name.empty()) {
      return absl::InvalidArgumentError("session launch needs a command and a unit name");
    }
    systemd::TransientService service;
    service.name = launch.unit_name;
    service.description = launch.description;
    service.argv = launch.argv;
    service.stdin_fd = launch.stdin_fd;
    service.stdout_fd = launch.stdout_fd;
    service.stop_timeout = stop_timeout_;
    service.oom_score_adjust = kSessionOomScoreAdjust;
    // A session that dies (or misses its watchdog) is started again and takes over what it
    // left in the unit's file descriptor store: the volume's I/O goes on.
    service.restart_on_abnormal = true;
    service.fd_store_max = kSessionFdStoreMax;
    service.watchdog = launch.watchdog;
    absl::Status status = units_->StartTransientService(service);
    if (status.code() == absl::StatusCode::kFailedPrecondition) {
      return absl::FailedPreconditionError(
          absl::StrCat(status.message(), ": a session for this volume is still running"));
    }
    return status;
  }

  absl::Status StopSupervisor(const state::v1::UserspaceSessionRecord& session) override {
    return session.unit().empty() ? absl::OkStatus() : units_->StopUnit(session.unit());
  }

  bool Supervised(const state::v1::UserspaceSessionRecord& session) override {
    if (session.unit().empty()) {
      return false;
    }
    auto state = units_->ActiveState(session.unit());
    return state.ok() && (*state == "active" || *state == "activating" || *state == "reloading");
  }

  std::string_view Name() const override { return "systemd"; }

 private:
  const std::unique_ptr<systemd::UnitManager> units_;
  const std::chrono::seconds stop_timeout_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<transport::userspace::SessionLauncher>> ConnectSystemdLauncher(
    const SystemdLauncherOptions& options) {
  systemd::UnitManagerOptions unit_options;
  unit_options.bus_address = options.bus_address;
  unit_options.call_timeout = options.call_timeout;
  SH_ASSIGN_OR_RETURN(auto units, systemd::UnitManager::Connect(std::move(unit_options)));
  return std::make_unique<SystemdLauncher>(std::move(units), options.stop_timeout);
}

absl::StatusOr<std::unique_ptr<transport::userspace::SessionLauncher>> MakeSessionLauncher(
    std::string_view choice, const SystemdLauncherOptions& options) {
  if (choice == "detached") {
    return transport::userspace::MakeDetachedLauncher();
  }
  if (choice != "systemd" && choice != "auto") {
    return absl::InvalidArgumentError(absl::StrCat("--session-launcher '", std::string(choice),
                                                   "' is not one of: auto, systemd, detached"));
  }
  auto systemd = ConnectSystemdLauncher(options);
  if (systemd.ok() || choice == "systemd") {
    return systemd;
  }
  Log(kComponent)
      .info("no systemd answers on {} ({}); session processes run as detached children",
            options.bus_address, std::string(systemd.status().message()));
  return transport::userspace::MakeDetachedLauncher();
}

}  // namespace stagehand::transport::userspace

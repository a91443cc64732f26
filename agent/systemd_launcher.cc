#include "agent/systemd_launcher.h"

#include <mutex>
#include <utility>
#include <vector>

#include <absl/strings/str_cat.h>
#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>

#include "base/log.h"
#include "base/unix_socket.h"

namespace stagehand::agent {
namespace {

// This component's logger (base/log.h).
spdlog::logger& Log() {
  static spdlog::logger& log = ComponentLog("sessions");
  return log;
}

constexpr char kDestination[] = "org.freedesktop.systemd1";
constexpr char kObjectPath[] = "/org/freedesktop/systemd1";
constexpr char kManager[] = "org.freedesktop.systemd1.Manager";

using Property = sdbus::Struct<std::string, sdbus::Variant>;
using ExecCommand = sdbus::Struct<std::string, std::vector<std::string>, bool>;
using AuxUnit = sdbus::Struct<std::string, std::vector<Property>>;

absl::Status FromDbus(const sdbus::Error& e, const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", e.getName(), ": ", e.getMessage()));
}

// sdbus-c++ 1.2 leaks the half-made bus when opening it fails, so an unreachable unix socket is
// detected here first (the common case: no systemd on this host, or the bus not mounted).
absl::Status CheckBusSocket(const std::string& address) {
  constexpr std::string_view kPrefix = "unix:path=";
  if (!address.starts_with(kPrefix)) {
    return absl::OkStatus();  // Other transports: left to sd-bus.
  }
  std::string path = address.substr(kPrefix.size());
  path = path.substr(0, path.find(','));
  return CheckListening(path);
}

class SystemdLauncher : public iscsi::SessionLauncher {
 public:
  explicit SystemdLauncher(SystemdLauncherOptions options) : options_(std::move(options)) {}

  // Must be called (and succeed) before Launch.
  absl::Status Connect() {
    std::lock_guard lock(mu_);
    return ConnectLocked();
  }

  absl::Status Launch(const iscsi::SessionLaunch& launch) override {
    if (launch.argv.empty() || launch.unit_name.empty()) {
      return absl::InvalidArgumentError("session launch needs a command and a unit name");
    }
    std::lock_guard lock(mu_);
    absl::Status status = StartLocked(launch);
    if (!status.ok() && status.code() == absl::StatusCode::kUnavailable) {
      // The bus connection may have gone stale (dbus or systemd restarted): connect once more.
      if (ConnectLocked().ok()) {
        status = StartLocked(launch);
      }
    }
    return status;
  }

  std::string_view Name() const override { return "systemd"; }

 private:
  absl::Status ConnectLocked() {
    if (auto reachable = CheckBusSocket(options_.bus_address); !reachable.ok()) {
      proxy_.reset();
      connection_.reset();
      return absl::Status(reachable.code(), absl::StrCat("systemd on ", options_.bus_address, ": ",
                                                         reachable.message()));
    }
    try {
      proxy_.reset();
      connection_ = sdbus::createSessionBusConnectionWithAddress(options_.bus_address);
      proxy_ = sdbus::createProxy(*connection_, kDestination, kObjectPath);
      sdbus::Variant version = proxy_->getProperty("Version").onInterface(kManager);
      version_ = version.get<std::string>();
    } catch (const sdbus::Error& e) {
      proxy_.reset();
      connection_.reset();
      return FromDbus(e, absl::StrCat("systemd on ", options_.bus_address));
    }
    return absl::OkStatus();
  }

  std::vector<Property> Properties(const iscsi::SessionLaunch& launch) const {
    std::vector<Property> props;
    props.emplace_back("Description", sdbus::Variant(launch.description));
    props.emplace_back(
        "ExecStart",
        sdbus::Variant(std::vector<ExecCommand>{ExecCommand(launch.argv[0], launch.argv, false)}));
    // "exec": the start job fails if the binary cannot be executed.
    props.emplace_back("Type", sdbus::Variant(std::string("exec")));
    props.emplace_back("StandardInputFileDescriptor",
                       sdbus::Variant(sdbus::UnixFd(launch.stdin_fd)));
    props.emplace_back("StandardOutputFileDescriptor",
                       sdbus::Variant(sdbus::UnixFd(launch.stdout_fd)));
    props.emplace_back("StandardError", sdbus::Variant(std::string("journal")));
    // Gone from systemd's list once it exits, failed or not (no `reset-failed` needed).
    props.emplace_back("CollectMode", sdbus::Variant(std::string("inactive-or-failed")));
    props.emplace_back("TimeoutStopUSec",
                       sdbus::Variant(static_cast<uint64_t>(
                           std::chrono::microseconds(options_.stop_timeout).count())));
    // The data path of mounted filesystems: the OOM killer should pick almost anything else.
    props.emplace_back("OOMScoreAdjust", sdbus::Variant(static_cast<int32_t>(-900)));
    return props;
  }

  absl::Status StartLocked(const iscsi::SessionLaunch& launch) {
    if (!proxy_) {
      return absl::UnavailableError(
          absl::StrCat("not connected to systemd on ", options_.bus_address));
    }
    const auto props = Properties(launch);
    for (int attempt = 0;; ++attempt) {
      try {
        sdbus::ObjectPath job;
        proxy_->callMethod("StartTransientUnit")
            .onInterface(kManager)
            .withTimeout(std::chrono::microseconds(options_.call_timeout))
            .withArguments(launch.unit_name, std::string("fail"), props, std::vector<AuxUnit>{})
            .storeResultsTo(job);
        return absl::OkStatus();
      } catch (const sdbus::Error& e) {
        if (e.getName() == "org.freedesktop.systemd1.UnitExists" && attempt == 0) {
          // A failed unit of an earlier session with the same name that systemd still lists;
          // a running one makes the reset fail and the retry report it.
          try {
            proxy_->callMethod("ResetFailedUnit")
                .onInterface(kManager)
                .withTimeout(std::chrono::microseconds(options_.call_timeout))
                .withArguments(launch.unit_name)
                .storeResultsTo();
          } catch (const sdbus::Error&) {
          }
          continue;
        }
        if (e.getName() == "org.freedesktop.systemd1.UnitExists") {
          return absl::FailedPreconditionError(
              absl::StrCat("systemd unit ", launch.unit_name,
                           " already exists: a session for this volume is still running"));
        }
        return FromDbus(e, absl::StrCat("start systemd unit ", launch.unit_name));
      }
    }
  }

  SystemdLauncherOptions options_;
  std::mutex mu_;
  std::unique_ptr<sdbus::IConnection> connection_;
  std::unique_ptr<sdbus::IProxy> proxy_;
  std::string version_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<iscsi::SessionLauncher>> ConnectSystemdLauncher(
    const SystemdLauncherOptions& options) {
  auto launcher = std::make_unique<SystemdLauncher>(options);
  SH_RETURN_IF_ERROR(launcher->Connect());
  return launcher;
}

absl::StatusOr<std::unique_ptr<iscsi::SessionLauncher>> MakeSessionLauncher(
    std::string_view choice, const SystemdLauncherOptions& options) {
  if (choice == "detached") {
    return iscsi::MakeDetachedLauncher();
  }
  if (choice != "systemd" && choice != "auto") {
    return absl::InvalidArgumentError(absl::StrCat("--session-launcher '", std::string(choice),
                                                   "' is not one of: auto, systemd, detached"));
  }
  auto systemd = ConnectSystemdLauncher(options);
  if (systemd.ok() || choice == "systemd") {
    return systemd;
  }
  Log().info("no systemd answers on {} ({}); session processes run as detached children",
             options.bus_address, std::string(systemd.status().message()));
  return iscsi::MakeDetachedLauncher();
}

}  // namespace stagehand::agent

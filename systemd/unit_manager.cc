#include "systemd/unit_manager.h"

#include <signal.h>

#include <utility>

#include <absl/strings/str_cat.h>
#include <sdbus-c++/sdbus-c++.h>

#include "base/mutex.h"
#include "base/unix_socket.h"

namespace stagehand::systemd {
namespace {

constexpr char kDestination[] = "org.freedesktop.systemd1";
constexpr char kObjectPath[] = "/org/freedesktop/systemd1";
constexpr char kManager[] = "org.freedesktop.systemd1.Manager";
constexpr char kUnitExists[] = "org.freedesktop.systemd1.UnitExists";
constexpr char kNoSuchUnit[] = "org.freedesktop.systemd1.NoSuchUnit";
constexpr char kUnit[] = "org.freedesktop.systemd1.Unit";

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

std::vector<Property> Properties(const TransientService& service) {
  std::vector<Property> props;
  props.emplace_back("Description", sdbus::Variant(service.description));
  props.emplace_back(
      "ExecStart",
      sdbus::Variant(std::vector<ExecCommand>{ExecCommand(service.argv[0], service.argv, false)}));
  // "exec": the start job fails if the binary cannot be executed.
  props.emplace_back("Type", sdbus::Variant(std::string("exec")));
  if (service.stdin_fd >= 0) {
    props.emplace_back("StandardInputFileDescriptor",
                       sdbus::Variant(sdbus::UnixFd(service.stdin_fd)));
  }
  if (service.stdout_fd >= 0) {
    props.emplace_back("StandardOutputFileDescriptor",
                       sdbus::Variant(sdbus::UnixFd(service.stdout_fd)));
  }
  props.emplace_back("StandardError", sdbus::Variant(std::string("journal")));
  // Gone from systemd's list once it exits, failed or not (no `reset-failed` needed).
  props.emplace_back("CollectMode", sdbus::Variant(std::string("inactive-or-failed")));
  props.emplace_back("TimeoutStopUSec",
                     sdbus::Variant(static_cast<uint64_t>(
                         std::chrono::microseconds(service.stop_timeout).count())));
  if (service.oom_score_adjust != 0) {
    props.emplace_back("OOMScoreAdjust",
                       sdbus::Variant(static_cast<int32_t>(service.oom_score_adjust)));
  }
  if (service.restart_on_abnormal) {
    props.emplace_back("Restart", sdbus::Variant(std::string("on-abnormal")));
    props.emplace_back("RestartUSec",
                       sdbus::Variant(static_cast<uint64_t>(
                           std::chrono::microseconds(service.restart_delay).count())));
    props.emplace_back("StartLimitIntervalUSec",
                       sdbus::Variant(static_cast<uint64_t>(
                           std::chrono::microseconds(std::chrono::seconds(10)).count())));
    props.emplace_back("StartLimitBurst",
                       sdbus::Variant(static_cast<uint32_t>(service.start_limit_burst)));
  }
  if (service.fd_store_max > 0) {
    props.emplace_back("FileDescriptorStoreMax",
                       sdbus::Variant(static_cast<uint32_t>(service.fd_store_max)));
    props.emplace_back("NotifyAccess", sdbus::Variant(std::string("main")));
  }
  if (service.watchdog.count() > 0) {
    props.emplace_back(
        "WatchdogUSec",
        sdbus::Variant(static_cast<uint64_t>(std::chrono::microseconds(service.watchdog).count())));
    props.emplace_back("WatchdogSignal", sdbus::Variant(static_cast<int32_t>(SIGKILL)));
  }
  return props;
}

class DbusUnitManager final : public UnitManager {
 public:
  explicit DbusUnitManager(UnitManagerOptions options) : options_(std::move(options)) {}

  absl::Status Connect() {
    MutexLock lock(mu_);
    return ConnectLocked();
  }

  absl::Status StartTransientService(const TransientService& service) override {
    if (service.argv.empty() || service.name.empty()) {
      return absl::InvalidArgumentError("a transient service needs a command and a name");
    }
    MutexLock lock(mu_);
    return Retried([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return StartLocked(service); });
  }

  absl::Status StopUnit(const std::string& name) override {
    MutexLock lock(mu_);
    return Retried([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      SH_RETURN_IF_ERROR(Connected());
      try {
        sdbus::ObjectPath job;
        proxy_->callMethod("StopUnit")
            .onInterface(kManager)
            .withTimeout(std::chrono::microseconds(options_.call_timeout))
            .withArguments(name, std::string("replace"))
            .storeResultsTo(job);
      } catch (const sdbus::Error& e) {
        if (e.getName() != kNoSuchUnit) {
          return FromDbus(e, absl::StrCat("stop systemd unit ", name));
        }
      }
      return absl::OkStatus();
    });
  }

  absl::StatusOr<std::string> ActiveState(const std::string& name) override {
    MutexLock lock(mu_);
    std::string state;
    const absl::Status asked = Retried([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
      SH_RETURN_IF_ERROR(Connected());
      try {
        sdbus::ObjectPath path;
        proxy_->callMethod("GetUnit")
            .onInterface(kManager)
            .withTimeout(std::chrono::microseconds(options_.call_timeout))
            .withArguments(name)
            .storeResultsTo(path);
        auto unit = sdbus::createProxy(*connection_, kDestination, path);
        state = unit->getProperty("ActiveState").onInterface(kUnit).get<std::string>();
      } catch (const sdbus::Error& e) {
        if (e.getName() != kNoSuchUnit) {
          return FromDbus(e, absl::StrCat("state of systemd unit ", name));
        }
        state = "inactive";
      }
      return absl::OkStatus();
    });
    if (!asked.ok()) {
      return asked;
    }
    return state;
  }

  std::string Version() const override {
    MutexLock lock(mu_);
    return version_;
  }

 private:
  absl::Status ConnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    proxy_.reset();
    connection_.reset();
    if (auto reachable = CheckBusSocket(options_.bus_address); !reachable.ok()) {
      return absl::Status(reachable.code(), absl::StrCat("systemd on ", options_.bus_address, ": ",
                                                         reachable.message()));
    }
    try {
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

  // Runs `call`; when the bus connection turns out stale (dbus or systemd restarted), connects
  // once more and runs it again.
  template <typename Call>
  absl::Status Retried(const Call& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Status status = call();
    if (!status.ok() && status.code() == absl::StatusCode::kUnavailable && ConnectLocked().ok()) {
      status = call();
    }
    return status;
  }

  absl::Status Connected() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return proxy_ ? absl::OkStatus()
                  : absl::UnavailableError(
                        absl::StrCat("not connected to systemd on ", options_.bus_address));
  }

  void Call(const std::string& method, const std::string& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    proxy_->callMethod(method)
        .onInterface(kManager)
        .withTimeout(std::chrono::microseconds(options_.call_timeout))
        .withArguments(unit)
        .storeResultsTo();
  }

  absl::Status StartLocked(const TransientService& service) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    SH_RETURN_IF_ERROR(Connected());
    const auto props = Properties(service);
    for (int attempt = 0;; ++attempt) {
      try {
        sdbus::ObjectPath job;
        proxy_->callMethod("StartTransientUnit")
            .onInterface(kManager)
            .withTimeout(std::chrono::microseconds(options_.call_timeout))
            .withArguments(service.name, std::string("fail"), props, std::vector<AuxUnit>{})
            .storeResultsTo(job);
        return absl::OkStatus();
      } catch (const sdbus::Error& e) {
        if (e.getName() == kUnitExists && attempt == 0) {
          // A failed unit of the same name that systemd still lists; a running one makes the
          // reset fail and the retry report it.
          try {
            Call("ResetFailedUnit", service.name);
          } catch (const sdbus::Error&) {
          }
          continue;
        }
        if (e.getName() == kUnitExists) {
          return absl::FailedPreconditionError(
              absl::StrCat("systemd unit ", service.name, " already exists and is running"));
        }
        return FromDbus(e, absl::StrCat("start systemd unit ", service.name));
      }
    }
  }

  const UnitManagerOptions options_;
  mutable Mutex mu_;
  std::unique_ptr<sdbus::IConnection> connection_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<sdbus::IProxy> proxy_ ABSL_GUARDED_BY(mu_);
  std::string version_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<UnitManager>> UnitManager::Connect(UnitManagerOptions options) {
  auto manager = std::make_unique<DbusUnitManager>(std::move(options));
  SH_RETURN_IF_ERROR(manager->Connect());
  return manager;
}

}  // namespace stagehand::systemd

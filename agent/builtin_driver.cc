#include "agent/builtin_driver.h"

#include <sys/sysinfo.h>

#include <chrono>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <spdlog/spdlog.h>

#include "agent/version.h"
#include "base/file_io.h"
#include "base/log.h"
#include "base/paths.h"
#include "driver/node_room.h"
#include "iscsi/initiator_name.h"
#include "proto/unix_grpc_server.h"
#include "transport/userspace/session_bundle.h"
#include "transport/userspace/systemd_launcher.h"

namespace stagehand::agent {
namespace {

constexpr LogComponent kComponent = LogComponent::kAgent;

// How long before session processes of an earlier build that could not be replaced (they were
// reconnecting) are tried again.
constexpr auto kUpgradeRetry = std::chrono::seconds(60);

}  // namespace

BuiltinDriver::BuiltinDriver(const DaemonOptions& options, EventLoop& loop)
    : options_(options), loop_(loop), csi_socket_(CsiSocketPath(options)) {}

absl::StatusOr<std::unique_ptr<BuiltinDriver>> BuiltinDriver::Start(const DaemonOptions& options,
                                                                    EventLoop& loop) {
  std::unique_ptr<BuiltinDriver> driver(new BuiltinDriver(options, loop));
  SH_ASSIGN_OR_RETURN(const std::string initiator,
                      iscsi::ResolveInitiatorName(options.initiator_name,
                                                  options.iscsi_initiator_conf, options.state_dir));
  SH_RETURN_IF_ERROR(driver->StartTransports());
  SH_RETURN_IF_ERROR(driver->StartCsiServer(initiator));
  SH_RETURN_IF_ERROR(driver->StartRegistrar());
  return driver;
}

absl::Status BuiltinDriver::StartTransports() {
  transport::userspace::UserspaceTransportOptions userspace;
  userspace.stall_timeout = options_.session_stall_timeout;
  userspace.session_watchdog = options_.session_watchdog;
  userspace.fuse_io_uring = options_.fuse_io_uring;
  userspace.sessions_dir = JoinPath(options_.runtime_dir, "sessions");
  transport::userspace::SystemdLauncherOptions launcher;
  launcher.bus_address = options_.systemd_bus_address;
  SH_ASSIGN_OR_RETURN(userspace.launcher, transport::userspace::MakeSessionLauncher(
                                              options_.session_launcher, launcher));
  session_launcher_ = std::string(userspace.launcher->Name());
  if (options_.mode == Mode::kKubernetes && session_launcher_ != "systemd") {
    Log(kComponent)
        .warn(
            "session processes run inside this pod and die with it: mount the host's system bus "
            "at {} so that they run as systemd units on the host",
            options_.systemd_bus_address);
  }
  userspace.binary = options_.session_binary.empty()
                         ? transport::userspace::UserspaceTransport::DefaultBinary()
                         : options_.session_binary;
  if (!options_.session_bundle_dir.empty()) {
    auto command =
        transport::userspace::InstallSessionBundle(userspace.binary, options_.session_bundle_dir);
    if (!command.ok()) {
      return WithContext(command.status(),
                         absl::StrCat("session bundle in '", options_.session_bundle_dir, "'"));
    }
    userspace.command = std::move(*command);
  }
  Log(kComponent)
      .info("session processes: launcher={} command='{}'", session_launcher_,
            userspace.command.empty() ? userspace.binary : absl::StrJoin(userspace.command, " "));
  userspace_ = std::make_unique<transport::userspace::UserspaceTransport>(std::move(userspace));
  if (auto probe = userspace_->ProbeSessionCommand(); !probe.ok()) {
    Log(kComponent).error("{}", probe);
    problems_.emplace_back(probe.message());
  }
  kernel_ = std::make_unique<transport::kernel::KernelTransport>(
      transport::kernel::KernelTransportOptions{});
  const absl::Status kernel_available = transport::kernel::KernelInitiatorAvailable();
  std::string default_transport = options_.iscsi_transport;
  if (default_transport == "auto") {
    default_transport =
        kernel_available.ok() ? transport::kernel::kName : transport::userspace::kName;
  } else if (default_transport == transport::kernel::kName && !kernel_available.ok()) {
    return WithContext(kernel_available, "--iscsi-transport=kernel");
  }
  if (kernel_available.ok()) {
    Log(kComponent)
        .info("iSCSI transport: {} by default (kernel initiator available)", default_transport);
  } else {
    Log(kComponent)
        .info("iSCSI transport: {} (kernel transport unavailable: {})", default_transport,
              kernel_available);
  }
  transports_.Add(*userspace_);
  if (kernel_available.ok()) {
    transports_.Add(*kernel_);
  } else {
    transports_.AddUnavailable(transport::kernel::kName, std::string(kernel_available.message()));
  }
  transports_.SetDefault(default_transport);
  return absl::OkStatus();
}

absl::Status BuiltinDriver::StartCsiServer(const std::string& initiator) {
  driver::NodeServiceOptions node_options;
  node_options.node_id = options_.node_id;
  node_options.max_volumes_per_node = options_.max_volumes_per_node;
  node_options.userspace_default = transports_.default_name() == transport::userspace::kName;
  node_options.session_memory_bytes =
      driver::SessionMemoryBytes(options_.fuse_io_uring, static_cast<unsigned>(get_nprocs_conf()));
  node_options.replacement_timeout_seconds = options_.replacement_timeout;
  node_options.takeover_after_seconds = options_.takeover_after;
  node_options.initiator_name = initiator;
  node_options.state_dir = options_.state_dir;
  node_options.runtime_dir = options_.runtime_dir;
  node_ = std::make_unique<driver::NodeService>(
      driver::NodeServiceDeps{transports_, mounter_, probe_, nullptr, nullptr, nullptr},
      node_options);
  identity_ = std::make_unique<driver::IdentityService>(options_.driver_name, kVersion);
  // A socket file there is a stale one of a previous run: the caller holds its lock.
  SH_ASSIGN_OR_RETURN(csi_server_, ServeOnUnixSocket(csi_socket_, {identity_.get(), node_.get()}));
  Log(kComponent)
      .info("serving driver='{}' node='{}' endpoint='{}' initiator='{}' version={}",
            options_.driver_name, options_.node_id, options_.csi_endpoint, initiator, kVersion);
  return absl::OkStatus();
}

absl::Status BuiltinDriver::StartRegistrar() {
  registration::RegistrarOptions registrar_options;
  registrar_options.registration_dir = options_.registration_dir;
  registrar_options.driver_name = options_.driver_name;
  registrar_options.endpoint =
      options_.kubelet_registration_path.empty() ? csi_socket_ : options_.kubelet_registration_path;
  // What the registering side told us, for operators: <state-dir>/registrar.json.
  registrar_record_ = std::make_unique<registration::RegistrarRecord>(
      JoinPath(options_.state_dir, "registrar.json"), registrar_options.endpoint);
  auto registrar = registration::Registrar::Start(
      registrar_options, [record = registrar_record_.get()](
                             const registration::RegistrarStatus& s) { record->Update(s); });
  if (!registrar.ok()) {
    return WithContext(registrar.status(), "registrar");
  }
  registrar_ = std::move(*registrar);
  Log(kComponent)
      .info("registration socket '{}' advertises endpoint '{}'", registrar_->socket_path(),
            registrar_options.endpoint);
  registrar_record_->Initial(registrar_->status());
  return absl::OkStatus();
}

void BuiltinDriver::StartUpgrades() {
  upgrades_ = std::make_unique<TaskRunner>("upgrades");
  upgrade_retry_ = std::make_unique<LoopTimer>(loop_, [this] { PostUpgrades(); });
  PostUpgrades();
}

void BuiltinDriver::PostUpgrades() {
  upgrades_->Post([this, stop = upgrades_stop_.get_token()] {
    const driver::NodeService::UpgradeRound round = node_->UpgradeSessions(stop);
    if (round.replaced > 0) {
      Log(kComponent)
          .info("replaced {} session process(es) of an earlier build in place", round.replaced);
    }
    if (round.waiting > 0 && !stop.stop_requested()) {
      upgrade_retry_->ScheduleAfter(kUpgradeRetry);  // Those that were reconnecting, or busy.
    }
  });
}

void BuiltinDriver::StopUpgrades() {
  upgrades_stop_.request_stop();
  if (upgrade_retry_) {
    upgrade_retry_->Close();
  }
  upgrades_.reset();  // Finishes the volume it is at.
}

BuiltinDriver::~BuiltinDriver() {
  StopUpgrades();
  registrar_.reset();  // Removes the registration socket.
  if (csi_server_) {
    csi_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(10));
    csi_server_->Wait();
    csi_server_.reset();
    (void)RemoveFileIfExists(csi_socket_);
  }
}

}  // namespace stagehand::agent

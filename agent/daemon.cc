#include "agent/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "agent/agent_health.h"
#include "agent/agent_service.h"
#include "agent/csi_node_client.h"
#include "agent/identity_service.h"
#include "agent/initiator_name.h"
#include "agent/manifest_source.h"
#include "agent/manifest_volume_store.h"
#include "agent/metrics.h"
#include "agent/node_id.h"
#include "agent/node_service.h"
#include "agent/session_bundle.h"
#include "agent/systemd_launcher.h"
#include "agent/version.h"
#include "base/file_io.h"
#include "base/log.h"
#include "base/paths.h"
#include "base/unique_fd.h"
#include "iscsi/kernel_transport.h"
#include "iscsi/transport_set.h"
#include "iscsi/userspace_transport.h"
#include "mounter/blkid_block_probe.h"
#include "mounter/libmount_mounter.h"
#include "proto/unix_grpc_server.h"
#include "reconciler/reconciler.h"
#include "registration/plugin_info_validation.h"
#include "registration/plugin_watcher.h"
#include "registration/registrar.h"
#include "registration/registry.h"
#include "registration/registry_files.h"

namespace stagehand::agent {
namespace {

// This component's logger (base/log.h).
spdlog::logger& Log() {
  static spdlog::logger& log = ComponentLog("agent");
  return log;
}

// Takes an exclusive flock on `path`; the lock lives as long as the returned descriptor.
absl::StatusOr<UniqueFd> LockFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open lock file '", path, "'"));
  }
  if (flock(fd.Get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "another stagehand is running with the same state directory or socket (lock '", path,
          "' is held); stop it first"));
    }
    return ErrnoStatus(errno, absl::StrCat("flock '", path, "'"));
  }
  return fd;
}

// sd_notify(3) when run by systemd (NOTIFY_SOCKET set); a no-op otherwise.
class SystemdNotifier {
 public:
  SystemdNotifier() {
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
      watchdog_usec_ = usec;
    }
  }

  void Notify(const std::string& state) const { (void)sd_notify(0, state.c_str()); }

  // How long the main loop may sleep: half the watchdog interval, at most 2 s.
  timespec LoopPeriod() const {
    uint64_t usec = 2'000'000;
    if (watchdog_usec_ > 0) {
      usec = std::min<uint64_t>(usec, watchdog_usec_ / 2);
    }
    return {static_cast<time_t>(usec / 1'000'000), static_cast<long>((usec % 1'000'000) * 1000)};
  }

 private:
  uint64_t watchdog_usec_ = 0;
};

// One line for `systemctl status`.
std::string Summary(const reconciler::Reconciler* reconciler,
                    const registration::Registry* registry) {
  std::string out = "serving";
  if (reconciler != nullptr) {
    const VolumeCounts counts = CountVolumes(reconciler->Status().volumes);
    absl::StrAppend(&out, "; ", counts.total, " volumes, ", counts.published, " published, ",
                    counts.failing, " failing");
  }
  if (registry != nullptr) {
    int unhealthy = 0;
    const auto plugins = registry->List();
    for (const auto& p : plugins) {
      unhealthy += p.healthy() ? 0 : 1;
    }
    absl::StrAppend(&out, "; ", plugins.size(), " plugins, ", unhealthy, " unhealthy");
  }
  return out;
}

// Hands manifest events to the reconciler.
class ReconcilerBridge final : public ManifestListener {
 public:
  void OnVolumeDeclared(const std::string& file, const reconciler::VolumeSpec& spec) override {
    reconciler->Declare(file, spec);
  }

  void OnManifestError(const std::string& file, const absl::Status& error) override {
    reconciler->ReportManifestError(file, std::string(error.message()));
  }

  void OnManifestRemoved(const std::string& file) override { reconciler->RemoveManifest(file); }

  void OnManifestRenamed(const std::string& from, const std::string& to) override {
    reconciler->RenameManifest(from, to);
  }

  void OnDirectoryListed() override { reconciler->DesiredComplete(); }

  reconciler::Reconciler* reconciler = nullptr;
};

}  // namespace

int RunDaemon(DaemonOptions options) {
  if (options.node_id.empty()) {
    std::array<char, 256> host{};
    gethostname(host.data(), host.size() - 1);
    options.node_id = host.data();
  }
  const bool kubernetes = options.mode == Mode::kKubernetes;
  if (auto s = ValidateNodeId(options.node_id, kubernetes); !s.ok()) {
    Log().error("startup failed: {}", std::string(s.message()));
    return 2;
  }
  if (kubernetes && !IsCleanAbsolutePath(options.kubelet_dir)) {
    Log().error("--kubelet-dir '{}' must be an absolute, normalised path", options.kubelet_dir);
    return 2;
  }
  const std::string plugins_root = kubernetes ? options.kubelet_dir : options.state_dir;
  if (options.csi_endpoint.empty()) {
    options.csi_endpoint = absl::StrCat(
        "unix://",
        JoinPath(plugins_root, absl::StrCat("plugins/", options.driver_name, "/csi.sock")));
  }
  if (options.registration_dir.empty()) {
    options.registration_dir = JoinPath(plugins_root, "plugins_registry");
  }
  if (!IsCleanAbsolutePath(options.registration_dir)) {
    Log().error("--registration-dir '{}' must be an absolute, normalised path",
                options.registration_dir);
    return 2;
  }
  if (kubernetes) {
    options.watch_plugins = false;  // The kubelet is the watcher.
  }
  auto endpoint_path = registration::EndpointSocketPath(options.csi_endpoint);
  if (!endpoint_path.ok()) {
    Log().error("--csi-endpoint: {} (use unix:///absolute/path)",
                std::string(endpoint_path.status().message()));
    return 2;
  }
  const std::string socket_path = *endpoint_path;
  for (const auto& dir : {options.state_dir, options.runtime_dir, ParentDir(socket_path)}) {
    if (auto s = MakeDirs(dir, 0700); !s.ok()) {
      Log().error("startup failed: {}", s);
      return 1;
    }
  }
  // Refuse to start rather than steal the socket or share the state of a running instance.
  auto state_lock = LockFile(JoinPath(options.state_dir, "stagehand.lock"));
  if (!state_lock.ok()) {
    Log().error("startup failed: {}", state_lock.status());
    return 1;
  }
  auto socket_lock = LockFile(absl::StrCat(socket_path, ".lock"));
  if (!socket_lock.ok()) {
    Log().error("startup failed: {}", socket_lock.status());
    return 1;
  }
  auto initiator =
      ResolveInitiatorName(options.initiator_name, options.iscsi_initiator_conf, options.state_dir);
  if (!initiator.ok()) {
    Log().error("startup failed: {}", initiator.status());
    return 2;
  }

  // Signals are read synchronously below; block them before gRPC starts its threads.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  iscsi::UserspaceTransportOptions transport_options;
  {
    SystemdLauncherOptions launcher_options;
    launcher_options.bus_address = options.systemd_bus_address;
    auto launcher = MakeSessionLauncher(options.session_launcher, launcher_options);
    if (!launcher.ok()) {
      Log().error("startup failed: {}", launcher.status());
      return launcher.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    transport_options.launcher = std::move(*launcher);
  }
  if (kubernetes && transport_options.launcher->Name() != "systemd") {
    Log().warn(
        "session processes run inside this pod and die with it: mount the host's system bus "
        "at {} so that they run as systemd units on the host",
        options.systemd_bus_address);
  }
  if (options.session_bundle_dir.empty() && kubernetes) {
    // Not under /run: many distributions mount it noexec. The kubelet's plugin directory is a
    // host path the pod mounts at the same place, and executable.
    options.session_bundle_dir =
        JoinPath(plugins_root, absl::StrCat("plugins/", options.driver_name, "/bin"));
  }
  if (!options.session_bundle_dir.empty()) {
    const std::string session_binary = iscsi::UserspaceTransport::DefaultBinary();
    auto command = InstallSessionBundle(session_binary, options.session_bundle_dir);
    if (!command.ok()) {
      Log().error("startup failed: session bundle in '{}': {}", options.session_bundle_dir,
                  command.status());
      return 1;
    }
    transport_options.command = std::move(*command);
  }
  Log().info("session processes: launcher={} command='{}'",
             std::string(transport_options.launcher->Name()),
             transport_options.command.empty() ? iscsi::UserspaceTransport::DefaultBinary()
                                               : absl::StrJoin(transport_options.command, " "));
  const std::string session_launcher(transport_options.launcher->Name());
  iscsi::UserspaceTransport userspace_transport(std::move(transport_options));
  iscsi::KernelTransport kernel_transport({});
  const absl::Status kernel_available = iscsi::KernelInitiatorAvailable();
  std::string default_transport = options.iscsi_transport;
  if (default_transport == "auto") {
    default_transport =
        kernel_available.ok() ? iscsi::kTransportKernel : iscsi::kTransportUserspace;
  } else if (default_transport == iscsi::kTransportKernel && !kernel_available.ok()) {
    Log().error("startup failed: --iscsi-transport=kernel: {}", kernel_available);
    return 1;
  }
  if (kernel_available.ok()) {
    Log().info("iSCSI transport: {} by default (kernel initiator available)", default_transport);
  } else {
    Log().info("iSCSI transport: {} (kernel transport unavailable: {})", default_transport,
               kernel_available);
  }
  iscsi::TransportSet transport(userspace_transport,
                                kernel_available.ok() ? &kernel_transport : nullptr,
                                default_transport, std::string(kernel_available.message()));
  mounter::LibmountMounter mounter;
  mounter::BlkidBlockProbe probe;
  NodeServiceOptions node_options;
  node_options.node_id = options.node_id;
  node_options.max_volumes_per_node = options.max_volumes_per_node;
  node_options.replacement_timeout_seconds = options.replacement_timeout;
  node_options.initiator_name = *initiator;
  node_options.state_dir = options.state_dir;
  node_options.runtime_dir = options.runtime_dir;
  NodeService node({transport, mounter, probe, nullptr, nullptr, nullptr}, node_options);
  IdentityService identity(options.driver_name, kVersion);

  // A socket file there is a stale one of a previous run: we hold its lock.
  auto served = ServeOnUnixSocket(socket_path, {&identity, &node});
  if (!served.ok()) {
    Log().error("startup failed: {}", served.status());
    return 1;
  }
  std::unique_ptr<grpc::Server> server = std::move(*served);
  Log().info("serving driver='{}' node='{}' endpoint='{}' initiator='{}' version={}",
             options.driver_name, options.node_id, options.csi_endpoint, *initiator, kVersion);

  // The plugin registry and the watcher (standalone), which finds our own driver through the
  // registrar's socket like any other plugin. Declared before the registrar so that the watcher
  // stops first on shutdown.
  registration::Registry registry;
  registration::RegistryFiles registry_files(options.state_dir, options.node_id, registry);
  std::unique_ptr<registration::PluginWatcher> watcher;
  // The reconciler to poke on registry changes; cleared (under the lock) before it is destroyed.
  std::mutex poke_mu;
  reconciler::Reconciler* poke_target = nullptr;  // Guarded by poke_mu.
  if (options.watch_plugins) {
    registry.SetListener([&registry_files, &poke_mu, &poke_target] {
      if (auto s = registry_files.Write(); !s.ok()) {
        Log().warn("cannot write the plugin registry files: {}", s);
      }
      std::lock_guard lock(poke_mu);
      if (poke_target != nullptr) {
        poke_target->Poke();  // Volumes waiting for a driver may proceed.
      }
    });
    (void)registry_files.Write();
  }

  registration::RegistrarOptions registrar_options;
  registrar_options.registration_dir = options.registration_dir;
  registrar_options.driver_name = options.driver_name;
  registrar_options.endpoint =
      options.kubelet_registration_path.empty() ? socket_path : options.kubelet_registration_path;
  // What the registering side told us, for operators: <state-dir>/registrar.json.
  const std::string registrar_file = JoinPath(options.state_dir, "registrar.json");
  std::mutex registrar_mu;
  state::v1::RegistrarState registrar_state;  // Guarded by registrar_mu; for the agent API.
  bool registrar_written = false;             // Guarded by registrar_mu.
  // `initial`: the state right after start, which must not overwrite what a (concurrent)
  // NotifyRegistrationStatus already recorded. The file is written under the lock too.
  auto record_registrar_state = [&registrar_mu, &registrar_state, &registrar_written,
                                 registrar_file, endpoint = registrar_options.endpoint](
                                    const registration::RegistrarStatus& status, bool initial) {
    state::v1::RegistrarState record;
    record.set_socket_path(status.socket_path);
    record.set_endpoint(endpoint);
    record.set_notified(status.notified);
    record.set_registered(status.registered);
    record.set_last_error(status.last_error);
    record.set_rejections(status.rejections);
    std::lock_guard lock(registrar_mu);
    if (initial && registrar_written) {
      return;
    }
    registrar_written = true;
    registrar_state = record;
    if (auto s = registration::WriteJsonFile(registrar_file, record); !s.ok()) {
      Log().warn("cannot write '{}': {}", registrar_file, s);
    }
  };
  auto write_registrar_state =
      [&record_registrar_state](const registration::RegistrarStatus& status) {
        record_registrar_state(status, /*initial=*/false);
      };
  auto registrar = registration::Registrar::Start(registrar_options, write_registrar_state);
  if (!registrar.ok()) {
    Log().error("startup failed: registrar: {}", registrar.status());
    server->Shutdown();
    return 1;
  }
  Log().info("registration socket '{}' advertises endpoint '{}'", (*registrar)->socket_path(),
             registrar_options.endpoint);
  record_registrar_state((*registrar)->status(), /*initial=*/true);

  if (options.watch_plugins) {
    registration::WatcherOptions watcher_options;
    watcher_options.registry_dir = options.registration_dir;
    watcher_options.probe_period = options.plugin_probe_period;
    auto started = registration::PluginWatcher::Start(watcher_options, registry);
    if (!started.ok()) {
      Log().error("startup failed: plugin watcher: {}", started.status());
      server->Shutdown();
      return 1;
    }
    watcher = std::move(*started);
  }

  // Standalone: the reconciler keeps the declared volumes staged and published.
  ManifestVolumeStore volume_store(options.state_dir);
  HostMountTable mount_table(mounter);
  OperationMetrics operation_metrics;
  RegistryDriverDirectory directory(registry, &operation_metrics);
  ReconcilerBridge bridge;
  std::unique_ptr<reconciler::Reconciler> reconciler;
  // Runs before `reconciler` is destroyed, on every return path.
  absl::Cleanup stop_pokes = [&poke_mu, &poke_target] {
    std::lock_guard lock(poke_mu);
    poke_target = nullptr;
  };
  std::unique_ptr<ManifestSource> manifests;
  if (options.watch_plugins) {
    reconciler::ReconcilerOptions reconciler_options;
    reconciler_options.staging_root = options.state_dir;
    reconciler_options.call_timeout = options.csi_timeout;
    reconciler_options.max_parallel = options.max_parallel_operations;
    reconciler_options.resync_period = options.resync_period;
    reconciler_options.on_failure = [&operation_metrics](const std::string& driver,
                                                         const std::string& operation) {
      operation_metrics.CountReconcileError(driver, operation);
    };
    reconciler = std::make_unique<reconciler::Reconciler>(reconciler_options, directory,
                                                          volume_store, mount_table);
    if (auto s = reconciler->Start(); !s.ok()) {
      Log().error("startup failed: reconciler: {}", s);
      server->Shutdown();
      return 1;
    }
    bridge.reconciler = reconciler.get();
    {
      std::lock_guard lock(poke_mu);
      poke_target = reconciler.get();
    }
    // A missing manifest directory is created only when no volume is managed yet; else it is
    // reported and every volume stays as it is (DesiredComplete comes with its first listing).
    const bool no_volumes = reconciler->Status().volumes.empty();
    auto source =
        ManifestSource::Start(options.manifest_dir, options.state_dir, bridge, no_volumes);
    if (!source.ok()) {
      Log().error("startup failed: manifests: {}", source.status());
      server->Shutdown();
      return 1;
    }
    manifests = std::move(*source);
  }

  // The agent API.
  AgentService agent_service(
      {std::string(kVersion), options.mode == Mode::kKubernetes ? "kubernetes" : "standalone",
       options.node_id, options.driver_name, options.watch_plugins ? options.manifest_dir : "",
       session_launcher, default_transport},
      reconciler.get(), options.watch_plugins ? &registry : nullptr,
      [&registrar_mu, &registrar_state] {
        std::lock_guard lock(registrar_mu);
        return registrar_state;
      });
  agent_service.set_manifest_problem([&manifests]() -> std::optional<std::string> {
    return manifests ? manifests->Problem() : std::nullopt;
  });
  const std::string agent_socket = options.agent_socket.empty()
                                       ? JoinPath(options.runtime_dir, "agent.sock")
                                       : options.agent_socket;
  auto agent_lock = LockFile(absl::StrCat(agent_socket, ".lock"));
  if (!agent_lock.ok()) {
    Log().error("startup failed: {}", agent_lock.status());
    server->Shutdown();
    return 1;
  }
  // Owner only, as the CSI socket and the README say.
  auto agent_served = ServeOnUnixSocket(agent_socket, {&agent_service});
  if (!agent_served.ok()) {
    Log().error("startup failed: agent socket: {}", agent_served.status());
    server->Shutdown();
    return 1;
  }
  std::unique_ptr<grpc::Server> agent_server = std::move(*agent_served);
  Log().info("agent API on '{}'{}", agent_socket,
             options.watch_plugins
                 ? absl::StrCat("; volumes declared in '", options.manifest_dir, "'")
                 : "");

  // Metrics and probes.
  auto collectable = std::make_shared<AgentCollectable>(reconciler.get(),
                                                        options.watch_plugins ? &registry : nullptr,
                                                        JoinPath(options.runtime_dir, "sessions"));
  std::unique_ptr<StatsCollector> stats;
  if (reconciler) {
    StatsCollector::Options stats_options;
    stats_options.period = options.stats_period;
    stats = std::make_unique<StatsCollector>(stats_options, *reconciler, directory, *collectable);
  }
  auto readiness = [&]() -> absl::Status {
    if (manifests) {
      if (auto problem = manifests->Problem(); problem) {
        return absl::UnavailableError(*problem);
      }
    }
    if (reconciler && !reconciler->Status().ready) {
      return absl::UnavailableError("the first reconcile is not done yet");
    }
    if (options.watch_plugins) {
      auto self = registry.Find(options.driver_name);
      if (!self || !self->healthy()) {
        return absl::UnavailableError(absl::StrCat("the built-in driver '", options.driver_name,
                                                   "' is not registered and healthy yet"));
      }
      return absl::OkStatus();
    }
    std::lock_guard lock(registrar_mu);
    if (!registrar_state.registered()) {
      return absl::UnavailableError(
          registrar_state.last_error().empty()
              ? "the kubelet has not registered the built-in driver yet"
              : absl::StrCat("registration rejected: ", registrar_state.last_error()));
    }
    return absl::OkStatus();
  };
  auto liveness = [&]() -> absl::Status {
    if (reconciler) {
      // Hangs (and the probe times out, the watchdog fires) if the loop's lock is stuck.
      (void)reconciler->Generation();
    }
    return absl::OkStatus();
  };
  std::unique_ptr<MetricsServer> metrics_server;
  if (!options.metrics_address.empty()) {
    auto started =
        MetricsServer::Start(options.metrics_address, {operation_metrics.registry(), collectable},
                             {liveness, readiness});
    if (!started.ok()) {
      Log().error("startup failed: {}", started.status());
      server->Shutdown();
      return 1;
    }
    metrics_server = std::move(*started);
    agent_service.set_metrics_port(metrics_server->port());
    Log().info("metrics on {} port {} (/metrics, /healthz, /readyz)", options.metrics_address,
               metrics_server->port());
  }

  // systemd: READY once the first reconcile is done, STATUS on change, WATCHDOG from this loop.
  const SystemdNotifier notifier;
  if (reconciler) {
    auto status = reconciler->Status();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!status.ready && std::chrono::steady_clock::now() < deadline) {
      status = reconciler->WaitForChange(status.generation, std::chrono::seconds(1));
    }
  }
  notifier.Notify("READY=1");
  uint64_t seen_generation = 0;
  std::string last_status;
  int sig = 0;
  while (true) {
    // The summary is rebuilt only when something changed: idle costs next to nothing.
    const uint64_t generation = reconciler ? reconciler->Generation() : 1;
    if (generation != seen_generation) {
      seen_generation = generation;
      std::string summary = Summary(reconciler.get(), options.watch_plugins ? &registry : nullptr);
      if (summary != last_status) {
        notifier.Notify(absl::StrCat("STATUS=", summary));
        last_status = std::move(summary);
      }
    }
    if (liveness().ok()) {
      notifier.Notify("WATCHDOG=1");
    }
    timespec wait = notifier.LoopPeriod();
    sig = sigtimedwait(&signals, nullptr, &wait);
    if (sig > 0) {
      break;
    }
  }
  notifier.Notify("STOPPING=1");
  Log().info("received signal {}, shutting down (volumes stay staged and published)",
             strsignal(sig));
  metrics_server.reset();
  // Calls in flight to a slow driver would hold the stop past TimeoutStopSec: cancel them (each
  // one's record already says uncertain, so the next start finishes or undoes it).
  directory.CancelAll();
  stats.reset();
  agent_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  agent_server->Wait();
  (void)RemoveFileIfExists(agent_socket);
  manifests.reset();
  std::move(stop_pokes).Invoke();
  reconciler.reset();  // Waits for running operations.
  watcher.reset();
  registrar->reset();  // Removes the registration socket.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(10));
  server->Wait();
  (void)RemoveFileIfExists(socket_path);
  return 0;
}

}  // namespace stagehand::agent

#include "agent/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <stop_token>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "status/agent_health.h"
#include "status/agent_service.h"
#include "status/driver_volumes.h"
#include "status/metrics.h"
#include "registration/registrar_record.h"
#include "status/stats_collector.h"
#include "agent/version.h"
#include "base/event_loop.h"
#include "base/file_io.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/paths.h"
#include "base/task_runner.h"
#include "base/unique_fd.h"
#include "driver/identity_service.h"
#include "driver/node_room.h"
#include "driver/node_service.h"
#include "iscsi/initiator_name.h"
#include "mounter/blkid_block_probe.h"
#include "mounter/libmount_mounter.h"
#include "proto/unix_grpc_server.h"
#include "reconciler/reconciler.h"
#include "registration/plugin_watcher.h"
#include "registration/registrar.h"
#include "registration/registry.h"
#include "registration/registry_files.h"
#include "csiclient/reconciler_client.h"
#include "manifests/manifest.h"
#include "manifests/manifest_source.h"
#include "manifests/manifest_volume_store.h"
#include "systemd/notifier.h"
#include "transport/kernel/kernel_transport.h"
#include "transport/registry.h"
#include "transport/userspace/session_bundle.h"
#include "transport/userspace/systemd_launcher.h"
#include "transport/userspace/userspace_transport.h"

namespace stagehand::agent {
namespace {

// This component's logger (base/log.h).
spdlog::logger& Log() {
  static spdlog::logger& log = ComponentLog("agent");
  return log;
}

// How long before session processes of an earlier build that could not be replaced (they were
// reconnecting) are tried again.
constexpr auto kUpgradeRetry = std::chrono::seconds(60);

// Takes an exclusive lock on `path` that lives as long as the returned descriptor, or the
// process. A POSIX record lock, not a flock: it is the process's and never inherited, so the
// lock of an agent that died is free at once. A flock belongs to the open file, which the
// processes the agent was starting (between fork and exec) still held for some milliseconds:
// an agent restarted right after a SIGKILL then found its own old lock taken.
absl::StatusOr<UniqueFd> LockFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open lock file '", path, "'"));
  }

  struct flock whole {};

  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;  // From the start, l_len 0: the whole file.
  if (fcntl(fd.Get(), F_SETLK, &whole) != 0) {
    if (errno == EACCES || errno == EAGAIN) {
      return absl::FailedPreconditionError(absl::StrCat(
          "another stagehand is running with the same state directory or socket (lock '", path,
          "' is held); stop it first"));
    }
    return ErrnoStatus(errno, absl::StrCat("lock '", path, "'"));
  }
  return fd;
}

// Prefixes a component's startup error with the component.
absl::Status In(const std::string& what, const absl::Status& status) {
  if (status.ok()) {
    return status;
  }
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

// Hands manifest events to the reconciler.
class ReconcilerBridge final : public manifests::ManifestListener {
 public:
  explicit ReconcilerBridge(reconciler::Reconciler& reconciler) : reconciler_(reconciler) {}

  void OnVolumeDeclared(const std::string& file, const reconciler::VolumeSpec& spec) override {
    reconciler_.Declare(file, spec);
  }

  void OnManifestError(const std::string& file, const absl::Status& error) override {
    reconciler_.ReportManifestError(file, std::string(error.message()));
  }

  void OnManifestRemoved(const std::string& file) override { reconciler_.RemoveManifest(file); }

  void OnManifestRenamed(const std::string& from, const std::string& to) override {
    reconciler_.RenameManifest(from, to);
  }

  void OnDirectoryListed() override { reconciler_.DesiredComplete(); }

 private:
  reconciler::Reconciler& reconciler_;
};

// Members are declared in start order; the destructor stops them in the order the data path
// needs, which is not quite the reverse.
class AgentDaemon final : public Daemon {
 public:
  explicit AgentDaemon(DaemonOptions options)
      : options_(std::move(options)), csi_socket_(CsiSocketPath(options_)) {}

  AgentDaemon(const AgentDaemon&) = delete;
  AgentDaemon& operator=(const AgentDaemon&) = delete;
  ~AgentDaemon() override;

  // Every startup step; on error the destructor stops what was started.
  absl::Status Start();

  absl::Status Run() override;

 private:
  bool kubernetes() const { return options_.mode == Mode::kKubernetes; }

  absl::Status TakeLocks();
  absl::Status StartTransports();
  absl::Status StartCsiServer();
  absl::Status StartRegistration();
  absl::Status StartReconciler();
  absl::Status StartAgentApi();
  absl::Status StartMetrics();
  // On the loop: READY=1 once the first reconcile is done (or 60 s passed), STATUS= when the
  // summary changed, WATCHDOG=1 while alive; then schedules itself again.
  void Tick();
  // Replaces session processes of an earlier build (on the upgrades runner); again after
  // kUpgradeRetry while some could not be replaced yet.
  void PostUpgrades();

  const DaemonOptions options_;
  const std::string csi_socket_;
  sigset_t signals_{};
  // The main thread's loop: signals, systemd notifications, the manifest and plugin watches,
  // the reconciler's rounds and every component's timers.
  std::unique_ptr<EventLoop> loop_;
  UniqueFd signal_fd_;
  std::unique_ptr<LoopWatch> signal_watch_;
  int signal_ = 0;
  const systemd::Notifier notifier_;
  std::unique_ptr<LoopTimer> tick_;
  std::chrono::steady_clock::time_point ready_deadline_;
  bool notified_ready_ = false;
  uint64_t seen_generation_ = 0;
  std::string last_status_;
  UniqueFd state_lock_;
  UniqueFd csi_socket_lock_;
  std::string initiator_;

  // The data path of the built-in driver.
  std::unique_ptr<transport::userspace::UserspaceTransport> userspace_transport_;
  std::unique_ptr<transport::kernel::KernelTransport> kernel_transport_;
  transport::Registry transport_;
  std::string session_launcher_;
  std::string default_transport_;
  mounter::LibmountMounter mounter_;
  mounter::BlkidBlockProbe probe_;
  std::unique_ptr<driver::NodeService> node_;
  // Replaces session processes of an earlier build, once after start (its thread then leaves).
  std::stop_source upgrades_stop_;
  std::unique_ptr<TaskRunner> upgrades_;
  std::unique_ptr<LoopTimer> upgrade_retry_;
  std::unique_ptr<driver::IdentityService> identity_;
  std::unique_ptr<grpc::Server> csi_server_;

  // The plugin registry and the watcher (standalone), which finds our own driver through the
  // registrar's socket like any other plugin.
  registration::Registry registry_;
  std::unique_ptr<registration::RegistryFiles> registry_files_;
  Mutex poke_mu_;
  reconciler::Reconciler* poke_target_ ABSL_GUARDED_BY(poke_mu_) = nullptr;
  std::unique_ptr<registration::RegistrarRecord> registrar_record_;
  std::unique_ptr<registration::Registrar> registrar_;
  std::unique_ptr<registration::PluginWatcher> watcher_;

  // Standalone: the reconciler keeps the declared volumes staged and published.
  std::unique_ptr<manifests::ManifestVolumeStore> volume_store_;
  std::unique_ptr<manifests::HostMountTable> mount_table_;
  status::OperationMetrics operation_metrics_;
  std::unique_ptr<csiclient::RegistryDriverDirectory> directory_;
  std::unique_ptr<reconciler::Reconciler> reconciler_;
  std::unique_ptr<ReconcilerBridge> bridge_;
  std::unique_ptr<manifests::ManifestSource> manifests_;

  // What the agent reports, and where.
  std::unique_ptr<status::AgentHealth> health_;
  std::unique_ptr<status::AgentService> agent_service_;
  UniqueFd agent_socket_lock_;
  std::unique_ptr<grpc::Server> agent_server_;
  std::shared_ptr<status::AgentCollectable> collectable_;
  std::unique_ptr<status::StatsCollector> stats_;
  std::unique_ptr<status::MetricsServer> metrics_server_;
};

absl::Status AgentDaemon::TakeLocks() {
  for (const auto& dir : {options_.state_dir, options_.runtime_dir, ParentDir(csi_socket_)}) {
    SH_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  }
  // Refuse to start rather than steal the socket or share the state of a running instance.
  SH_ASSIGN_OR_RETURN(state_lock_, LockFile(JoinPath(options_.state_dir, "stagehand.lock")));
  SH_ASSIGN_OR_RETURN(csi_socket_lock_, LockFile(absl::StrCat(csi_socket_, ".lock")));
  SH_ASSIGN_OR_RETURN(
      initiator_, iscsi::ResolveInitiatorName(options_.initiator_name,
                                              options_.iscsi_initiator_conf, options_.state_dir));
  return absl::OkStatus();
}

absl::Status AgentDaemon::StartTransports() {
  transport::userspace::UserspaceTransportOptions transport_options;
  transport_options.stall_timeout = options_.session_stall_timeout;
  transport_options.session_watchdog = options_.session_watchdog;
  transport_options.fuse_io_uring = options_.fuse_io_uring;
  transport_options.sessions_dir = JoinPath(options_.runtime_dir, "sessions");
  transport::userspace::SystemdLauncherOptions launcher_options;
  launcher_options.bus_address = options_.systemd_bus_address;
  SH_ASSIGN_OR_RETURN(transport_options.launcher, transport::userspace::MakeSessionLauncher(
                                                      options_.session_launcher, launcher_options));
  session_launcher_ = std::string(transport_options.launcher->Name());
  if (kubernetes() && session_launcher_ != "systemd") {
    Log().warn(
        "session processes run inside this pod and die with it: mount the host's system bus "
        "at {} so that they run as systemd units on the host",
        options_.systemd_bus_address);
  }
  transport_options.binary = options_.session_binary.empty()
                                 ? transport::userspace::UserspaceTransport::DefaultBinary()
                                 : options_.session_binary;
  if (!options_.session_bundle_dir.empty()) {
    auto command = transport::userspace::InstallSessionBundle(transport_options.binary,
                                                              options_.session_bundle_dir);
    if (!command.ok()) {
      return In(absl::StrCat("session bundle in '", options_.session_bundle_dir, "'"),
                command.status());
    }
    transport_options.command = std::move(*command);
  }
  Log().info("session processes: launcher={} command='{}'", session_launcher_,
             transport_options.command.empty() ? transport_options.binary
                                               : absl::StrJoin(transport_options.command, " "));
  userspace_transport_ =
      std::make_unique<transport::userspace::UserspaceTransport>(std::move(transport_options));
  kernel_transport_ = std::make_unique<transport::kernel::KernelTransport>(
      transport::kernel::KernelTransportOptions{});
  const absl::Status kernel_available = transport::kernel::KernelInitiatorAvailable();
  default_transport_ = options_.iscsi_transport;
  if (default_transport_ == "auto") {
    default_transport_ =
        kernel_available.ok() ? transport::kernel::kName : transport::userspace::kName;
  } else if (default_transport_ == transport::kernel::kName && !kernel_available.ok()) {
    return In("--iscsi-transport=kernel", kernel_available);
  }
  if (kernel_available.ok()) {
    Log().info("iSCSI transport: {} by default (kernel initiator available)", default_transport_);
  } else {
    Log().info("iSCSI transport: {} (kernel transport unavailable: {})", default_transport_,
               kernel_available);
  }
  transport_.Add(*userspace_transport_);
  if (kernel_available.ok()) {
    transport_.Add(*kernel_transport_);
  } else {
    transport_.AddUnavailable(transport::kernel::kName, std::string(kernel_available.message()));
  }
  transport_.SetDefault(default_transport_);
  return absl::OkStatus();
}

absl::Status AgentDaemon::StartCsiServer() {
  driver::NodeServiceOptions node_options;
  node_options.node_id = options_.node_id;
  node_options.max_volumes_per_node = options_.max_volumes_per_node;
  node_options.userspace_default = default_transport_ == transport::userspace::kName;
  node_options.session_memory_bytes =
      driver::SessionMemoryBytes(options_.fuse_io_uring, static_cast<unsigned>(get_nprocs_conf()));
  node_options.replacement_timeout_seconds = options_.replacement_timeout;
  node_options.initiator_name = initiator_;
  node_options.state_dir = options_.state_dir;
  node_options.runtime_dir = options_.runtime_dir;
  node_ = std::make_unique<driver::NodeService>(
      driver::NodeServiceDeps{transport_, mounter_, probe_, nullptr, nullptr, nullptr},
      node_options);
  identity_ = std::make_unique<driver::IdentityService>(options_.driver_name, kVersion);
  // A socket file there is a stale one of a previous run: we hold its lock.
  SH_ASSIGN_OR_RETURN(csi_server_, ServeOnUnixSocket(csi_socket_, {identity_.get(), node_.get()}));
  Log().info("serving driver='{}' node='{}' endpoint='{}' initiator='{}' version={}",
             options_.driver_name, options_.node_id, options_.csi_endpoint, initiator_, kVersion);
  return absl::OkStatus();
}

absl::Status AgentDaemon::StartRegistration() {
  registry_files_ = std::make_unique<registration::RegistryFiles>(options_.state_dir,
                                                                  options_.node_id, registry_);
  if (options_.watch_plugins) {
    registry_.SetListener([this] {
      if (auto s = registry_files_->Write(); !s.ok()) {
        Log().warn("cannot write the plugin registry files: {}", s);
      }
      MutexLock lock(poke_mu_);
      if (poke_target_ != nullptr) {
        poke_target_->Poke();  // Volumes waiting for a driver may proceed.
      }
    });
    (void)registry_files_->Write();
  }
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
    return In("registrar", registrar.status());
  }
  registrar_ = std::move(*registrar);
  Log().info("registration socket '{}' advertises endpoint '{}'", registrar_->socket_path(),
             registrar_options.endpoint);
  registrar_record_->Initial(registrar_->status());

  if (options_.watch_plugins) {
    registration::WatcherOptions watcher_options;
    watcher_options.registry_dir = options_.registration_dir;
    watcher_options.probe_period = options_.plugin_probe_period;
    auto watcher = registration::PluginWatcher::Start(watcher_options, registry_, RealClock::Get(),
                                                      loop_.get());
    if (!watcher.ok()) {
      return In("plugin watcher", watcher.status());
    }
    watcher_ = std::move(*watcher);
  }
  return absl::OkStatus();
}

absl::Status AgentDaemon::StartReconciler() {
  directory_ =
      std::make_unique<csiclient::RegistryDriverDirectory>(
      registry_, [](const std::string& path) { return manifests::LoadSecretsFile(path); },
      &operation_metrics_);
  if (!options_.watch_plugins) {
    return absl::OkStatus();
  }
  volume_store_ = std::make_unique<manifests::ManifestVolumeStore>(options_.state_dir);
  mount_table_ = std::make_unique<manifests::HostMountTable>(mounter_);
  reconciler::ReconcilerOptions reconciler_options;
  reconciler_options.staging_root = options_.state_dir;
  reconciler_options.call_timeout = options_.csi_timeout;
  reconciler_options.max_parallel = options_.max_parallel_operations;
  reconciler_options.resync_period = options_.resync_period;
  reconciler_options.on_failure = [metrics = &operation_metrics_](const std::string& driver,
                                                                  const std::string& operation) {
    metrics->CountReconcileError(driver, operation);
  };
  reconciler_ =
      std::make_unique<reconciler::Reconciler>(reconciler_options, *directory_, *volume_store_,
                                               *mount_table_, RealClock::Get(), loop_.get());
  SH_RETURN_IF_ERROR(In("reconciler", reconciler_->Start()));
  bridge_ = std::make_unique<ReconcilerBridge>(*reconciler_);
  {
    MutexLock lock(poke_mu_);
    poke_target_ = reconciler_.get();
  }
  // A missing manifest directory is created only when no volume is managed yet; else it is
  // reported and every volume stays as it is (DesiredComplete comes with its first listing).
  const bool no_volumes = reconciler_->Status().volumes.empty();
  auto source = manifests::ManifestSource::Start(options_.manifest_dir, options_.state_dir,
                                                  *bridge_, no_volumes, loop_.get());
  if (!source.ok()) {
    return In("manifests", source.status());
  }
  manifests_ = std::move(*source);
  return absl::OkStatus();
}

absl::Status AgentDaemon::StartAgentApi() {
  status::AgentHealth::Sources sources;
  sources.driver_name = options_.driver_name;
  sources.reconciler = reconciler_.get();
  sources.registry = options_.watch_plugins ? &registry_ : nullptr;
  if (manifests_) {
    sources.manifest_problem = [m = manifests_.get()] { return m->Problem(); };
  }
  sources.registrar = registrar_record_.get();
  if (!reconciler_ && node_) {
    sources.driver_volume_problems = [node = node_.get(), name = options_.driver_name] {
      agent::v1::ListVolumesResponse volumes;
      std::vector<std::string> problems;
      status::ListDriverVolumes(*node, name, &volumes, &problems);
      return problems;
    };
  }
  health_ = std::make_unique<status::AgentHealth>(std::move(sources));
  agent_service_ = std::make_unique<status::AgentService>(
      status::AgentInfo{std::string(kVersion), kubernetes() ? "kubernetes" : "standalone", options_.node_id,
                options_.driver_name, options_.watch_plugins ? options_.manifest_dir : "",
                session_launcher_, default_transport_},
      *health_, node_.get());
  SH_ASSIGN_OR_RETURN(agent_socket_lock_, LockFile(absl::StrCat(options_.agent_socket, ".lock")));
  // Owner only, as the CSI socket and the README say.
  auto served = ServeOnUnixSocket(options_.agent_socket, {agent_service_.get()});
  if (!served.ok()) {
    return In("agent socket", served.status());
  }
  agent_server_ = std::move(*served);
  Log().info("agent API on '{}'{}", options_.agent_socket,
             options_.watch_plugins
                 ? absl::StrCat("; volumes declared in '", options_.manifest_dir, "'")
                 : "");
  return absl::OkStatus();
}

absl::Status AgentDaemon::StartMetrics() {
  collectable_ = std::make_shared<status::AgentCollectable>(reconciler_.get(),
                                                    options_.watch_plugins ? &registry_ : nullptr,
                                                    [t = &transport_] { return t->Sessions(); });
  if (reconciler_) {
    status::StatsCollector::Options stats_options;
    stats_options.period = options_.stats_period;
    stats_options.health_period = options_.health_period;
    stats_ = std::make_unique<status::StatsCollector>(stats_options, *reconciler_, *directory_,
                                              *collectable_, loop_.get());
  } else if (node_) {
    collectable_->SetVolumeHealthSource([node = node_.get(), name = options_.driver_name] {
      return status::DriverVolumeHealth(*node, name);
    });
  }
  if (options_.metrics_address.empty()) {
    return absl::OkStatus();
  }
  SH_ASSIGN_OR_RETURN(
      metrics_server_,
      status::MetricsServer::Start(options_.metrics_address, {operation_metrics_.registry(), collectable_},
                           {[health = health_.get()] { return health->Live(); },
                            [health = health_.get()] { return health->Ready(); },
                            [health = health_.get()] { return health->VolumeProblems(); }}));
  agent_service_->set_metrics_port(metrics_server_->port());
  Log().info("metrics on {} port {} (/metrics, /healthz, /readyz)", options_.metrics_address,
             metrics_server_->port());
  return absl::OkStatus();
}

absl::Status AgentDaemon::Start() {
  SH_RETURN_IF_ERROR(TakeLocks());
  // Signals are read from a signalfd on the loop; block them before any thread starts.
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGTERM);
  sigaddset(&signals_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  signal(SIGPIPE, SIG_IGN);
  SH_ASSIGN_OR_RETURN(loop_, EventLoop::Create());
  signal_fd_ = UniqueFd(signalfd(-1, &signals_, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!signal_fd_) {
    return ErrnoStatus(errno, "signalfd");
  }
  SH_ASSIGN_OR_RETURN(
      signal_watch_, LoopWatch::Start(*loop_, signal_fd_.Get(), [this] {
        signalfd_siginfo info{};
        while (read(signal_fd_.Get(), &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
          signal_ = static_cast<int>(info.ssi_signo);
        }
        if (signal_ != 0) {
          loop_->Stop();
        }
      }));
  SH_RETURN_IF_ERROR(StartTransports());
  SH_RETURN_IF_ERROR(StartCsiServer());
  SH_RETURN_IF_ERROR(StartRegistration());
  SH_RETURN_IF_ERROR(StartReconciler());
  SH_RETURN_IF_ERROR(StartAgentApi());
  SH_RETURN_IF_ERROR(StartMetrics());
  // Session processes left running by an earlier build of stagehand (a package or image
  // upgrade) are replaced one at a time, in place, while everything else serves.
  upgrades_ = std::make_unique<TaskRunner>("upgrades");
  upgrade_retry_ = std::make_unique<LoopTimer>(*loop_, [this] { PostUpgrades(); });
  PostUpgrades();
  return absl::OkStatus();
}

void AgentDaemon::PostUpgrades() {
  upgrades_->Post([this, stop = upgrades_stop_.get_token()] {
    const driver::NodeService::UpgradeRound round = node_->UpgradeSessions(stop);
    if (round.replaced > 0) {
      Log().info("replaced {} session process(es) of an earlier build in place", round.replaced);
    }
    if (round.waiting > 0 && !stop.stop_requested()) {
      upgrade_retry_->ScheduleAfter(kUpgradeRetry);  // Those that were reconnecting, or busy.
    }
  });
}

void AgentDaemon::Tick() {
  if (!notified_ready_ && (!reconciler_ || reconciler_->Ready() ||
                           std::chrono::steady_clock::now() >= ready_deadline_)) {
    notifier_.Notify("READY=1");
    notified_ready_ = true;
  }
  // The summary is rebuilt only when something changed: idle costs next to nothing.
  const uint64_t generation = reconciler_ ? reconciler_->Generation() : 1;
  if (generation != seen_generation_) {
    seen_generation_ = generation;
    std::string summary = health_->Summary();
    if (summary != last_status_) {
      notifier_.Notify(absl::StrCat("STATUS=", summary));
      last_status_ = std::move(summary);
    }
  }
  if (health_->Live().ok()) {
    notifier_.Notify("WATCHDOG=1");
  }
  // Often until ready (READY=1 soon after the first reconcile), then at the watchdog's pace.
  const timespec period = notifier_.LoopPeriod();
  const auto next = notified_ready_ ? std::chrono::seconds(period.tv_sec) +
                                          std::chrono::nanoseconds(period.tv_nsec)
                                    : std::chrono::nanoseconds(std::chrono::milliseconds(20));
  tick_->ScheduleAfter(std::chrono::ceil<std::chrono::milliseconds>(next));
}

absl::Status AgentDaemon::Run() {
  ready_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  tick_ = std::make_unique<LoopTimer>(*loop_, [this] { Tick(); });
  tick_->ScheduleNow();
  SH_RETURN_IF_ERROR(loop_->Run());
  tick_.reset();
  notifier_.Notify("STOPPING=1");
  Log().info("received signal {}, shutting down (volumes stay staged and published)",
             sigdescr_np(signal_));
  return absl::OkStatus();
}

AgentDaemon::~AgentDaemon() {
  upgrades_stop_.request_stop();
  if (upgrade_retry_) {
    upgrade_retry_->Close();
  }
  upgrades_.reset();  // Finishes the volume it is at.
  metrics_server_.reset();
  // Calls in flight to a slow driver would hold the stop past TimeoutStopSec: cancel them (each
  // one's record already says uncertain, so the next start finishes or undoes it).
  if (directory_) {
    directory_->CancelAll();
  }
  stats_.reset();
  if (agent_server_) {
    agent_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    agent_server_->Wait();
    agent_server_.reset();
    (void)RemoveFileIfExists(options_.agent_socket);
  }
  manifests_.reset();
  {
    MutexLock lock(poke_mu_);
    poke_target_ = nullptr;
  }
  reconciler_.reset();  // Waits for running operations.
  watcher_.reset();
  registrar_.reset();  // Removes the registration socket.
  if (csi_server_) {
    csi_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(10));
    csi_server_->Wait();
    csi_server_.reset();
    (void)RemoveFileIfExists(csi_socket_);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Create(DaemonOptions options) {
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  SH_ASSIGN_OR_RETURN(DaemonOptions resolved,
                      ResolveDaemonOptions(std::move(options), host.data()));
  auto daemon = std::make_unique<AgentDaemon>(std::move(resolved));
  SH_RETURN_IF_ERROR(daemon->Start());
  return daemon;
}

int ExitCode(const absl::Status& status) {
  if (status.ok()) {
    return 0;
  }
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

}  // namespace stagehand::agent

// The standalone assembly: stagehand is the whole stack. The built-in driver registers in
// stagehand's own registration directory, where the plugin watcher finds it like any other
// plugin; the reconciler keeps the volumes the manifests declare staged and published through
// the registered drivers; stats and health rounds feed the metrics and the volumes' conditions.

#include <memory>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "agent/assembly.h"
#include "agent/builtin_driver.h"
#include "agent/reporting.h"
#include "agent/version.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/mutex.h"
#include "csiclient/reconciler_client.h"
#include "manifests/manifest.h"
#include "manifests/manifest_source.h"
#include "manifests/manifest_volume_store.h"
#include "mounter/libmount_mounter.h"
#include "reconciler/reconciler.h"
#include "registration/plugin_watcher.h"
#include "registration/registry.h"
#include "registration/registry_files.h"
#include "status/driver_volumes.h"
#include "status/metrics.h"
#include "status/stats_collector.h"

namespace stagehand::agent {
namespace {

constexpr LogComponent kComponent = LogComponent::kAgent;

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
class StandaloneAssembly final : public Assembly {
 public:
  StandaloneAssembly() = default;
  StandaloneAssembly(const StandaloneAssembly&) = delete;
  StandaloneAssembly& operator=(const StandaloneAssembly&) = delete;

  absl::Status Start(const DaemonOptions& options, EventLoop& loop) {
    SH_ASSIGN_OR_RETURN(driver_, BuiltinDriver::Start(options, loop));
    SH_RETURN_IF_ERROR(StartPlugins(options, loop));
    SH_RETURN_IF_ERROR(StartReconciler(options, loop));
    SH_RETURN_IF_ERROR(StartReporting(options, loop));
    // Session processes left running by an earlier build of stagehand (a package or image
    // upgrade) are replaced one at a time, in place, while everything else serves.
    driver_->StartUpgrades();
    return absl::OkStatus();
  }

  ~StandaloneAssembly() override {
    if (driver_) {
      driver_->StopUpgrades();
    }
    if (reporting_) {
      reporting_->StopMetrics();
    }
    // Calls in flight to a slow driver would hold the stop past TimeoutStopSec: cancel them
    // (each one's record already says uncertain, so the next start finishes or undoes it).
    if (directory_) {
      directory_->CancelAll();
    }
    stats_.reset();
    reporting_.reset();
    manifests_.reset();
    {
      MutexLock lock(poke_mu_);
      poke_target_ = nullptr;
    }
    reconciler_.reset();  // Waits for running operations.
    watcher_.reset();
    driver_.reset();  // The registration socket, then the CSI server.
  }

  const status::AgentHealth& health() const override { return reporting_->health(); }

  bool Reconciled() const override { return reconciler_->Ready(); }

  uint64_t Generation() const override { return reconciler_->Generation(); }

 private:
  // The plugin registry, its files and the watcher, which finds our own driver through the
  // registrar's socket like any other plugin.
  absl::Status StartPlugins(const DaemonOptions& options, EventLoop& loop) {
    registry_files_ = std::make_unique<registration::RegistryFiles>(options.state_dir,
                                                                    options.node_id, registry_);
    registry_.SetListener([this] {
      if (auto s = registry_files_->Write(); !s.ok()) {
        Log(kComponent).warn("cannot write the plugin registry files: {}", s);
      }
      MutexLock lock(poke_mu_);
      if (poke_target_ != nullptr) {
        poke_target_->Poke();  // Volumes waiting for a driver may proceed.
      }
    });
    (void)registry_files_->Write();
    registration::WatcherOptions watcher_options;
    watcher_options.registry_dir = options.registration_dir;
    watcher_options.probe_period = options.plugin_probe_period;
    auto watcher =
        registration::PluginWatcher::Start(watcher_options, registry_, RealClock::Get(), &loop);
    if (!watcher.ok()) {
      return WithContext(watcher.status(), "plugin watcher");
    }
    watcher_ = std::move(*watcher);
    return absl::OkStatus();
  }

  absl::Status StartReconciler(const DaemonOptions& options, EventLoop& loop) {
    directory_ = std::make_unique<csiclient::RegistryDriverDirectory>(
        registry_, [](const std::string& path) { return manifests::LoadSecretsFile(path); },
        &operations_);
    volume_store_ = std::make_unique<manifests::ManifestVolumeStore>(options.state_dir);
    mount_table_ = std::make_unique<manifests::HostMountTable>(mounter_);
    reconciler::ReconcilerOptions reconciler_options;
    reconciler_options.staging_root = options.state_dir;
    reconciler_options.call_timeout = options.csi_timeout;
    reconciler_options.max_parallel = options.max_parallel_operations;
    reconciler_options.resync_period = options.resync_period;
    reconciler_options.on_failure = [metrics = &operations_](const std::string& driver,
                                                             const std::string& operation) {
      metrics->CountReconcileError(driver, operation);
    };
    reconciler_ = std::make_unique<reconciler::Reconciler>(
        reconciler_options, *directory_, *volume_store_, *mount_table_, RealClock::Get(), &loop);
    SH_RETURN_IF_ERROR(WithContext(reconciler_->Start(), "reconciler"));
    bridge_ = std::make_unique<ReconcilerBridge>(*reconciler_);
    {
      MutexLock lock(poke_mu_);
      poke_target_ = reconciler_.get();
    }
    // A missing manifest directory is created only when no volume is managed yet; else it is
    // reported and every volume stays as it is (DesiredComplete comes with its first listing).
    const bool no_volumes = reconciler_->Status().volumes.empty();
    auto source = manifests::ManifestSource::Start(options.manifest_dir, options.state_dir,
                                                   *bridge_, no_volumes, &loop);
    if (!source.ok()) {
      return WithContext(source.status(), "manifests");
    }
    manifests_ = std::move(*source);
    return absl::OkStatus();
  }

  absl::Status StartReporting(const DaemonOptions& options, EventLoop& loop) {
    BuiltinDriver* driver = driver_.get();
    collectable_ = std::make_shared<status::AgentCollectable>(
        reconciler_.get(), &registry_, [driver] { return driver->transports().Sessions(); });
    collectable_->SetReservationSource([driver] { return driver->node().ReservationTallies(); });
    status::StatsCollector::Options stats_options;
    stats_options.period = options.stats_period;
    stats_options.health_period = options.health_period;
    stats_ = std::make_unique<status::StatsCollector>(stats_options, *reconciler_, *directory_,
                                                      *collectable_, &loop);
    Reporting::Parts parts;
    parts.health.driver_name = options.driver_name;
    parts.health.reconciler = reconciler_.get();
    parts.health.registry = &registry_;
    parts.health.registrar = &driver->registrar_record();
    parts.health.manifest_problem = [m = manifests_.get()] { return m->Problem(); };
    parts.info = {std::string(kVersion),
                  "standalone",
                  options.node_id,
                  options.driver_name,
                  options.manifest_dir,
                  driver->session_launcher(),
                  driver->transports().default_name(),
                  driver->problems()};
    parts.node = &driver->node();
    parts.metrics = {operations_.registry(), collectable_};
    SH_ASSIGN_OR_RETURN(reporting_, Reporting::Start(options, std::move(parts)));
    return absl::OkStatus();
  }

  std::unique_ptr<BuiltinDriver> driver_;
  registration::Registry registry_;
  std::unique_ptr<registration::RegistryFiles> registry_files_;
  Mutex poke_mu_;
  reconciler::Reconciler* poke_target_ ABSL_GUARDED_BY(poke_mu_) = nullptr;
  std::unique_ptr<registration::PluginWatcher> watcher_;
  status::OperationMetrics operations_;
  std::unique_ptr<csiclient::RegistryDriverDirectory> directory_;
  mounter::LibmountMounter mounter_;
  std::unique_ptr<manifests::ManifestVolumeStore> volume_store_;
  std::unique_ptr<manifests::HostMountTable> mount_table_;
  std::unique_ptr<reconciler::Reconciler> reconciler_;
  std::unique_ptr<ReconcilerBridge> bridge_;
  std::unique_ptr<manifests::ManifestSource> manifests_;
  std::shared_ptr<status::AgentCollectable> collectable_;
  std::unique_ptr<status::StatsCollector> stats_;
  std::unique_ptr<Reporting> reporting_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Assembly>> StartStandaloneAssembly(const DaemonOptions& options,
                                                                  EventLoop& loop) {
  auto assembly = std::make_unique<StandaloneAssembly>();
  SH_RETURN_IF_ERROR(assembly->Start(options, loop));
  return assembly;
}

}  // namespace stagehand::agent

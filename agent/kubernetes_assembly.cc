// The Kubernetes assembly: the built-in driver and what reports on it. The kubelet is the
// reconciler; the agent API lists the driver's own volumes, and metrics ask the driver about
// their health at scrape time.

#include <memory>
#include <string>
#include <vector>

#include "agent/assembly.h"
#include "agent/builtin_driver.h"
#include "agent/reporting.h"
#include "agent/version.h"
#include "status/driver_volumes.h"
#include "status/metrics.h"

namespace stagehand::agent {
namespace {

class KubernetesAssembly final : public Assembly {
 public:
  KubernetesAssembly() = default;
  KubernetesAssembly(const KubernetesAssembly&) = delete;
  KubernetesAssembly& operator=(const KubernetesAssembly&) = delete;

  absl::Status Start(const DaemonOptions& options, EventLoop& loop) {
    SH_ASSIGN_OR_RETURN(driver_, BuiltinDriver::Start(options, loop));
    BuiltinDriver* driver = driver_.get();
    collectable_ = std::make_shared<status::AgentCollectable>(
        nullptr, nullptr, [driver] { return driver->transports().Sessions(); });
    collectable_->SetReservationSource([driver] { return driver->node().ReservationTallies(); });
    collectable_->SetVolumeHealthSource([driver, name = options.driver_name] {
      return status::DriverVolumeHealth(driver->node(), name);
    });
    Reporting::Parts parts;
    parts.health.driver_name = options.driver_name;
    parts.health.registrar = &driver->registrar_record();
    parts.health.kubelet_registers = options.mode == Mode::kKubernetes;
    parts.health.driver_volume_problems = [driver, name = options.driver_name] {
      agent::v1::ListVolumesResponse volumes;
      std::vector<std::string> problems;
      status::ListDriverVolumes(driver->node(), name, &volumes, &problems);
      return problems;
    };
    parts.info = {std::string(kVersion),
                  options.mode == Mode::kKubernetes ? "kubernetes" : "standalone",
                  options.node_id,
                  options.driver_name,
                  "",
                  driver->session_launcher(),
                  driver->transports().default_name(),
                  driver->problems()};
    parts.node = &driver->node();
    parts.metrics = {operations_.registry(), collectable_};
    SH_ASSIGN_OR_RETURN(reporting_, Reporting::Start(options, std::move(parts)));
    // Session processes left running by an earlier build of stagehand (a package or image
    // upgrade) are replaced one at a time, in place, while everything else serves.
    driver_->StartUpgrades();
    return absl::OkStatus();
  }

  ~KubernetesAssembly() override {
    if (driver_) {
      driver_->StopUpgrades();
    }
    reporting_.reset();
    driver_.reset();
  }

  const status::AgentHealth& health() const override { return reporting_->health(); }

  bool Reconciled() const override { return true; }

  uint64_t Generation() const override { return 1; }

 private:
  std::unique_ptr<BuiltinDriver> driver_;
  status::OperationMetrics operations_;  // No reconciler calls drivers here: stays empty.
  std::shared_ptr<status::AgentCollectable> collectable_;
  std::unique_ptr<Reporting> reporting_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Assembly>> StartKubernetesAssembly(const DaemonOptions& options,
                                                                  EventLoop& loop) {
  auto assembly = std::make_unique<KubernetesAssembly>();
  SH_RETURN_IF_ERROR(assembly->Start(options, loop));
  return assembly;
}

absl::StatusOr<std::unique_ptr<Assembly>> StartAssembly(const DaemonOptions& options,
                                                        EventLoop& loop) {
  if (options.mode == Mode::kStandalone && options.watch_plugins) {
    return StartStandaloneAssembly(options, loop);
  }
  return StartKubernetesAssembly(options, loop);
}

}  // namespace stagehand::agent

#pragma once

// What stagehand exports for Prometheus, and the HTTP endpoint that serves it with /healthz and
// /readyz (prometheus-cpp's exposer; the two probes are answered from civetweb's request hook).
//
// - Operation metrics live in a prometheus::Registry: stagehand_csi_operations_seconds
//   (histogram by driver, method, grpc_status_code, the kubelet's csi_operations_seconds shape)
//   and stagehand_reconcile_errors_total (by driver, operation).
// - State is computed at scrape time by AgentCollectable: volumes by phase, plugins by health,
//   userspace iSCSI sessions by state, their reconnects and identity mismatches, their data-path
//   counters (stagehand_datapath_*_total by volume_id, from each session's counters file), and the
//   last volume stats gathered by the StatsCollector (agent/stats_collector.h)
//   (stagehand_volume_stats_*, the kubelet's names), the start time of each session's process
//   (stagehand_session_process_start_time_seconds by volume_id), and what the built-in driver's
//   stages met of other nodes' reservations (stagehand_reservation_refusals_total and
//   stagehand_reservation_takeovers_total by volume_id).
// - The MetricsServer adds stagehand_agent_ready, from the /readyz check.

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "csiclient/reconciler_client.h"
#include "driver/takeover_watch.h"
#include "status/metrics_tls.h"
#include "transport/transport.h"

namespace prometheus {
class Exposer;
}

namespace stagehand::reconciler {
class Reconciler;
}

namespace stagehand::registration {
class Registry;
}

namespace stagehand::status {

// Thread-safe.
class OperationMetrics final : public csiclient::CallObserver {
 public:
  OperationMetrics();

  void ObserveCsiCall(const std::string& driver, const std::string& method, absl::StatusCode code,
                      std::chrono::steady_clock::duration elapsed) override;
  void CountReconcileError(const std::string& driver, const std::string& operation);

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Histogram>* csi_seconds_;
  prometheus::Family<prometheus::Counter>* reconcile_errors_;
};

// Builds the state metrics at scrape time. Thread-safe. Pointers may be null (Kubernetes mode has
// no reconciler or registry); they must outlive the collectable.
class AgentCollectable final : public prometheus::Collectable {
 public:
  // The sessions of the built-in driver's transports (transport::Transport::Sessions); may be
  // empty. Called at scrape time from the exposer's thread.
  using SessionSource = std::function<std::vector<transport::SessionSample>()>;

  AgentCollectable(const reconciler::Reconciler* reconciler, const registration::Registry* registry,
                   SessionSource sessions);

  std::vector<prometheus::MetricFamily> Collect() const override;

  void SetVolumeStats(std::vector<csiclient::VolumeStatsSample> samples);
  void SetVolumeHealth(std::vector<csiclient::VolumeHealthSample> samples);

  // Without health rounds (no reconciler): the volume health is asked for at scrape time. Set
  // before the first scrape; `source` must be thread-safe and must not do I/O to the LUNs.
  void SetVolumeHealthSource(std::function<std::vector<csiclient::VolumeHealthSample>()> source) {
    health_source_ = std::move(source);
  }

  // The built-in driver's counts of other nodes' reservations its stages met
  // (driver::NodeService::ReservationTallies). Set before the first scrape; `source` must be
  // thread-safe.
  void SetReservationSource(std::function<std::vector<driver::ReservationTally>()> source) {
    reservations_ = std::move(source);
  }

 private:
  // One group of families each, appended to `out`.
  void CollectVolumes(std::vector<prometheus::MetricFamily>& out) const;
  void CollectPlugins(std::vector<prometheus::MetricFamily>& out) const;
  // The sessions of the built-in driver and their data-path counters, from its transports.
  void CollectSessions(std::vector<prometheus::MetricFamily>& out) const;
  void CollectVolumeStats(std::vector<prometheus::MetricFamily>& out) const;
  void CollectReservations(std::vector<prometheus::MetricFamily>& out) const;

  const reconciler::Reconciler* reconciler_;
  const registration::Registry* registry_;
  SessionSource sessions_;
  mutable Mutex mu_;
  std::vector<csiclient::VolumeStatsSample> stats_ ABSL_GUARDED_BY(mu_);
  std::vector<csiclient::VolumeHealthSample> health_ ABSL_GUARDED_BY(mu_);
  std::function<std::vector<csiclient::VolumeHealthSample>()> health_source_;
  std::function<std::vector<driver::ReservationTally>()> reservations_;
};

// `address` as civetweb listens on it: an IPv6 literal without brackets ("fd00::1:29780", as
// the DaemonSet's $(HOST_IP):29780 gives on an IPv6 node) gets them ("[fd00::1]:29780");
// anything else is returned as it is.
std::string ListeningAddress(const std::string& address);

// The HTTP endpoint. /metrics: the registry and the collectable; /healthz: `live`; /readyz:
// `ready` (200 with "ok", else 503 with the reason), followed by one line per entry of `details`
// (volumes that need someone to act).
class MetricsServer {
 public:
  struct Probes {
    std::function<absl::Status()> live;
    std::function<absl::Status()> ready;
    std::function<std::vector<std::string>()> details;  // May be empty.
  };

  // `address` is host:port ("127.0.0.1:29780", "[::1]:29780", "::1:29780", "0.0.0.0:29780").
  // With `tls` enabled it serves HTTPS only; with a client CA, /metrics answers 403 to a client
  // without a certificate (the probes answer anyone).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, std::vector<std::shared_ptr<prometheus::Collectable>> sources,
      Probes probes, const MetricsTls& tls = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port (useful with port 0).
  int port() const;

  // Answers a probe path; nullopt for other paths. Exposed for tests.
  std::optional<std::pair<int, std::string>> Probe(std::string_view path) const;

  // Whether /metrics needs a verified client certificate.
  bool client_cert_required() const { return client_cert_required_; }

 private:
  MetricsServer() = default;

  Probes probes_;
  bool client_cert_required_ = false;  // For /metrics.
  UniqueFd tls_pem_;                   // The certificate and key civetweb reads (CivetConfig).
  std::vector<std::shared_ptr<prometheus::Collectable>> sources_;  // The exposer holds weak_ptrs.
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace stagehand::status

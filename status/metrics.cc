#include "status/metrics.h"

#include <CivetServer.h>
#include <civetweb.h>
#include <dirent.h>
#include <prometheus/exposer.h>

#include <algorithm>
#include <map>

#include <absl/strings/str_cat.h>

#include "base/file_io.h"
#include "base/mutex.h"
#include "base/paths.h"
#include "csiclient/reconciler_client.h"
#include "reconciler/reconciler.h"
#include "registration/registry.h"
#include "status/agent_health.h"

namespace stagehand::status {
namespace {

// gRPC's own code names, as the kubelet's csi_operations_seconds labels them.
const char* GrpcCodeName(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return "OK";
    case absl::StatusCode::kCancelled:
      return "Canceled";
    case absl::StatusCode::kUnknown:
      return "Unknown";
    case absl::StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case absl::StatusCode::kDeadlineExceeded:
      return "DeadlineExceeded";
    case absl::StatusCode::kNotFound:
      return "NotFound";
    case absl::StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case absl::StatusCode::kPermissionDenied:
      return "PermissionDenied";
    case absl::StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case absl::StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case absl::StatusCode::kAborted:
      return "Aborted";
    case absl::StatusCode::kOutOfRange:
      return "OutOfRange";
    case absl::StatusCode::kUnimplemented:
      return "Unimplemented";
    case absl::StatusCode::kInternal:
      return "Internal";
    case absl::StatusCode::kUnavailable:
      return "Unavailable";
    case absl::StatusCode::kDataLoss:
      return "DataLoss";
    case absl::StatusCode::kUnauthenticated:
      return "Unauthenticated";
    default:
      return "Unknown";
  }
}

prometheus::MetricFamily Family(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

prometheus::MetricFamily Gauge(std::string name, std::string help) {
  return Family(std::move(name), std::move(help), prometheus::MetricType::Gauge);
}

prometheus::MetricFamily Counter(std::string name, std::string help) {
  return Family(std::move(name), std::move(help), prometheus::MetricType::Counter);
}

void Add(prometheus::MetricFamily& f, std::vector<prometheus::ClientMetric::Label> labels,
         double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (f.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

// stagehand_agent_ready, from the same check as /readyz, so that an alert can see it.
class ReadinessCollectable final : public prometheus::Collectable {
 public:
  explicit ReadinessCollectable(std::function<absl::Status()> ready) : ready_(std::move(ready)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    auto ready = Gauge("stagehand_agent_ready",
                       "1 when the agent is ready (what /readyz answers with 200), else 0");
    Add(ready, {}, !ready_ || ready_().ok() ? 1 : 0);
    std::vector<prometheus::MetricFamily> out;
    out.push_back(std::move(ready));
    return out;
  }

 private:
  std::function<absl::Status()> ready_;
};

std::atomic<const MetricsServer*> g_server{nullptr};

void Answer(mg_connection* conn, int code, const std::string& text) {
  const char* reason = code == 200 ? "OK" : code == 403 ? "Forbidden" : "Service Unavailable";
  const std::string body = text + "\n";
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "
            "%zu\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n%s",
            code, reason, body.size(), body.c_str());
}

int BeginRequest(mg_connection* conn) {
  const MetricsServer* server = g_server.load();
  const mg_request_info* info = mg_get_request_info(conn);
  if (server == nullptr) {
    // Starting or stopping: answer nothing rather than /metrics without the client check.
    Answer(conn, 503, "starting or stopping");
    return 503;
  }
  if (info == nullptr || info->local_uri == nullptr) {
    return 0;
  }
  auto answer = server->Probe(info->local_uri);
  if (answer) {
    Answer(conn, answer->first, answer->second);
    return answer->first;
  }
  // /metrics and everything else: the exposer, for a verified client where one is required
  // (a certificate that does not verify against the CA already failed the handshake).
  if (server->client_cert_required() && info->client_cert == nullptr) {
    Answer(conn, 403, "a client certificate signed by the agent's --metrics-client-ca is required");
    return 403;
  }
  return 0;
}

}  // namespace

OperationMetrics::OperationMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  csi_seconds_ = &prometheus::BuildHistogram()
                      .Name("stagehand_csi_operations_seconds")
                      .Help("CSI calls made by the agent, by driver, method and gRPC code")
                      .Register(*registry_);
  reconcile_errors_ = &prometheus::BuildCounter()
                           .Name("stagehand_reconcile_errors_total")
                           .Help("Failed reconciler operations, by driver and operation")
                           .Register(*registry_);
}

void OperationMetrics::ObserveCsiCall(const std::string& driver, const std::string& method,
                                      absl::StatusCode code,
                                      std::chrono::steady_clock::duration elapsed) {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {0.1, 0.25, 0.5, 1,   2.5, 5,  10,
                                                                   15,  25,   50,  120, 300, 600};
  csi_seconds_
      ->Add({{"driver_name", driver},
             {"method_name", method},
             {"grpc_status_code", GrpcCodeName(code)}},
            kBuckets)
      .Observe(std::chrono::duration<double>(elapsed).count());
}

void OperationMetrics::CountReconcileError(const std::string& driver,
                                           const std::string& operation) {
  reconcile_errors_->Add({{"driver_name", driver}, {"operation", operation}}).Increment();
}

AgentCollectable::AgentCollectable(const reconciler::Reconciler* reconciler,
                                   const registration::Registry* registry, SessionSource sessions)
    : reconciler_(reconciler), registry_(registry), sessions_(std::move(sessions)) {}

void AgentCollectable::SetVolumeHealth(std::vector<csiclient::VolumeHealthSample> samples) {
  MutexLock lock(mu_);
  health_ = std::move(samples);
}

void AgentCollectable::SetVolumeStats(std::vector<csiclient::VolumeStatsSample> samples) {
  MutexLock lock(mu_);
  stats_ = std::move(samples);
}

std::vector<prometheus::MetricFamily> AgentCollectable::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  CollectVolumes(out);
  CollectPlugins(out);
  CollectSessions(out);
  CollectVolumeStats(out);
  CollectReservations(out);
  return out;
}

void AgentCollectable::CollectVolumes(std::vector<prometheus::MetricFamily>& out) const {
  if (reconciler_ != nullptr) {
    auto volumes = Gauge("stagehand_volumes", "Declared volumes by phase");
    // These phases are always there (0 when no volume is in them); the others when one is.
    std::map<std::string, int> by_phase = {
        {"pending", 0}, {"published", 0}, {"staged", 0}, {"error", 0}, {"waiting", 0}};
    for (const auto& [phase, n] : CountVolumes(reconciler_->Status().volumes).by_phase) {
      by_phase[std::string(reconciler::VolumePhaseName(phase))] += n;
    }
    for (const auto& [phase, n] : by_phase) {
      Add(volumes, {{"phase", phase}}, n);
    }
    out.push_back(std::move(volumes));
  }
}

void AgentCollectable::CollectPlugins(std::vector<prometheus::MetricFamily>& out) const {
  if (registry_ != nullptr) {
    auto plugins = Gauge("stagehand_plugins", "Registered CSI plugins by health");
    auto healthy = Gauge("stagehand_plugin_healthy", "1 when the plugin answers Probe");
    int up = 0;
    int down = 0;
    for (const auto& p : registry_->List()) {
      (p.healthy() ? up : down)++;
      Add(healthy, {{"driver_name", p.name()}}, p.healthy() ? 1 : 0);
    }
    Add(plugins, {{"health", "healthy"}}, up);
    Add(plugins, {{"health", "unhealthy"}}, down);
    out.push_back(std::move(plugins));
    out.push_back(std::move(healthy));
  }
}

void AgentCollectable::CollectSessions(std::vector<prometheus::MetricFamily>& out) const {
  // Userspace iSCSI sessions of the built-in driver, from their status files.
  auto sessions = Gauge("stagehand_iscsi_sessions", "Userspace iSCSI sessions by state");
  auto reconnects = Gauge("stagehand_iscsi_session_reconnects",
                          "Reconnects of the current userspace iSCSI sessions, summed");
  auto mismatches = Gauge("stagehand_iscsi_identity_mismatches",
                          "Sessions failed closed because the LUN identity changed");
  auto started = Gauge("stagehand_session_process_start_time_seconds",
                       "When the process serving the volume's userspace iSCSI session started, "
                       "in seconds since the epoch (a successor moves it: changes() counts "
                       "restarts)");
  std::map<std::string, int> by_state = {{"UP", 0},       {"RECONNECTING", 0},
                                         {"STARTING", 0}, {"IDENTITY_MISMATCH", 0},
                                         {"FAILED", 0},   {"FENCED", 0}};

  // Data-path counters, as the transport counts them.
  using Counters = transport::SessionSample::Counters;

  struct CounterField {
    uint64_t Counters::*field;
    prometheus::MetricFamily family;
  };

  std::vector<CounterField> datapath;
  datapath.push_back(
      {&Counters::read_bytes, Counter("stagehand_datapath_read_bytes_total",
                                      "Bytes read through the volume's userspace iSCSI session")});
  datapath.push_back({&Counters::write_bytes,
                      Counter("stagehand_datapath_written_bytes_total",
                              "Bytes written through the volume's userspace iSCSI session")});
  datapath.push_back({&Counters::read_ops,
                      Counter("stagehand_datapath_read_operations_total", "Completed reads")});
  datapath.push_back({&Counters::write_ops,
                      Counter("stagehand_datapath_write_operations_total", "Completed writes")});
  datapath.push_back(
      {&Counters::flush_ops, Counter("stagehand_datapath_flush_operations_total",
                                     "Completed cache flushes (SYNCHRONIZE CACHE)")});
  datapath.push_back(
      {&Counters::io_errors,
       Counter("stagehand_datapath_io_errors_total",
               "Requests answered with an I/O error after retries (the filesystem saw EIO)")});
  double reconnect_sum = 0;
  for (const transport::SessionSample& s :
       sessions_ ? sessions_() : std::vector<transport::SessionSample>{}) {
    ++by_state[s.state];
    reconnect_sum += static_cast<double>(s.reconnects);
    if (s.process_started) {
      Add(started, {{"volume_id", s.volume_id}}, *s.process_started);
    }
    if (s.counters) {
      for (auto& c : datapath) {
        Add(c.family, {{"volume_id", s.volume_id}}, static_cast<double>((*s.counters).*c.field));
      }
    }
  }
  for (auto& c : datapath) {
    out.push_back(std::move(c.family));
  }
  for (const auto& [name, n] : by_state) {
    Add(sessions, {{"state", name}}, n);
  }
  Add(reconnects, {}, reconnect_sum);
  Add(mismatches, {}, by_state["IDENTITY_MISMATCH"]);
  out.push_back(std::move(sessions));
  out.push_back(std::move(reconnects));
  out.push_back(std::move(mismatches));
  out.push_back(std::move(started));
}

void AgentCollectable::CollectReservations(std::vector<prometheus::MetricFamily>& out) const {
  if (!reservations_) {
    return;
  }
  auto refusals = Counter("stagehand_reservation_refusals_total",
                          "Stages of the volume refused because another node held its LUN's "
                          "reservation (the volume waits for that node)");
  auto takeovers = Counter("stagehand_reservation_takeovers_total",
                           "Stages of the volume that preempted another node's reservation, "
                           "unchanged for the takeover time (that node is fenced)");
  for (const driver::ReservationTally& t : reservations_()) {
    Add(refusals, {{"volume_id", t.volume_id}}, static_cast<double>(t.refusals));
    Add(takeovers, {{"volume_id", t.volume_id}}, static_cast<double>(t.takeovers));
  }
  out.push_back(std::move(refusals));
  out.push_back(std::move(takeovers));
}

void AgentCollectable::CollectVolumeStats(std::vector<prometheus::MetricFamily>& out) const {
  // Volume stats, named like the kubelet's.
  MutexLock lock(mu_);

  struct Field {
    const char* name;
    const char* help;
    int64_t csiclient::VolumeStatsSample::*member;
  };

  static const Field kFields[] = {
      {"stagehand_volume_stats_capacity_bytes", "Capacity in bytes of the volume",
       &csiclient::VolumeStatsSample::capacity_bytes},
      {"stagehand_volume_stats_available_bytes", "Available bytes in the volume",
       &csiclient::VolumeStatsSample::available_bytes},
      {"stagehand_volume_stats_used_bytes", "Used bytes in the volume",
       &csiclient::VolumeStatsSample::used_bytes},
      {"stagehand_volume_stats_inodes", "Maximum number of inodes in the volume",
       &csiclient::VolumeStatsSample::inodes},
      {"stagehand_volume_stats_inodes_free", "Free inodes in the volume",
       &csiclient::VolumeStatsSample::inodes_free},
      {"stagehand_volume_stats_inodes_used", "Used inodes in the volume",
       &csiclient::VolumeStatsSample::inodes_used},
  };
  for (const auto& field : kFields) {
    auto f = Gauge(field.name, field.help);
    for (const auto& s : stats_) {
      if (s.*field.member >= 0) {
        Add(f, {{"driver_name", s.driver}, {"volume", s.volume}, {"target", s.target}},
            static_cast<double>(s.*field.member));
      }
    }
    out.push_back(std::move(f));
  }
  auto abnormal = Gauge("stagehand_volume_stats_health_status_abnormal",
                        "1 when the driver reports the volume condition abnormal");
  for (const auto& s : stats_) {
    Add(abnormal, {{"driver_name", s.driver}, {"volume", s.volume}, {"target", s.target}},
        s.abnormal ? 1 : 0);
  }
  out.push_back(std::move(abnormal));
  auto problems = Gauge("stagehand_volume_health_problem",
                        "1 per problem the driver's NodeGetVolumeHealth reports for the volume "
                        "(the last health round, or asked at scrape time without a reconciler); "
                        "heals: whether it goes away by itself (yes, no; unknown for another "
                        "driver's reasons); no series while it is healthy");
  const std::vector<csiclient::VolumeHealthSample> asked =
      health_source_ ? health_source_() : std::vector<csiclient::VolumeHealthSample>{};
  for (const auto& h : health_source_ ? asked : health_) {
    for (const auto& p : h.problems) {
      Add(problems,
          {{"driver_name", h.driver},
           {"volume", h.volume},
           {"status", p.status},
           {"reason", p.reason},
           {"heals", !p.heals   ? "unknown"
                     : *p.heals ? "yes"
                                : "no"}},
          1);
    }
  }
  out.push_back(std::move(problems));
}

std::string ListeningAddress(const std::string& address) {
  const size_t last = address.rfind(':');
  if (address.empty() || address.front() == '[' || last == std::string::npos ||
      address.find(':') == last) {
    return address;
  }
  return absl::StrCat("[", address.substr(0, last), "]", address.substr(last));
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, std::vector<std::shared_ptr<prometheus::Collectable>> sources,
    Probes probes, const MetricsTls& tls) {
  SH_RETURN_IF_ERROR(ValidateMetricsTls(tls));
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->probes_ = std::move(probes);
  server->client_cert_required_ = !tls.client_ca_file.empty();
  SH_ASSIGN_OR_RETURN(CivetConfig civet, CivetOptions(ListeningAddress(address), tls));
  server->tls_pem_ = std::move(civet.pem);
  static CivetCallbacks callbacks{};
  callbacks.begin_request = &BeginRequest;
  // Set before the first request can come: a request is never answered without the checks.
  g_server = server.get();
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(std::move(civet.options), &callbacks);
  } catch (const std::exception& e) {
    g_server = nullptr;
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on '", address, "': ", e.what(),
        tls.enabled() ? " (with TLS the certificate and key must match; civetweb's log says more)"
                      : ""));
  }
  sources.push_back(std::make_shared<ReadinessCollectable>(server->probes_.ready));
  for (auto& source : sources) {
    server->exposer_->RegisterCollectable(source);
  }
  server->sources_ = std::move(sources);
  return server;
}

MetricsServer::~MetricsServer() {
  exposer_.reset();  // No request is served after this.
  g_server = nullptr;
}

int MetricsServer::port() const {
  auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

std::optional<std::pair<int, std::string>> MetricsServer::Probe(std::string_view path) const {
  const std::function<absl::Status()>* check = nullptr;
  if (path == "/healthz") {
    check = &probes_.live;
  } else if (path == "/readyz") {
    check = &probes_.ready;
  } else {
    return std::nullopt;
  }
  const absl::Status s = *check ? (*check)() : absl::OkStatus();
  std::string body = s.ok() ? std::string("ok") : std::string(s.message());
  if (check == &probes_.ready && probes_.details) {
    for (const std::string& line : probes_.details()) {
      absl::StrAppend(&body, "\n", line);
    }
  }
  return std::make_pair(s.ok() ? 200 : 503, std::move(body));
}

}  // namespace stagehand::status

#pragma once

// What reports on an assembly, and where: the agent API on its socket (mode 0600; its lock
// keeps a second agent off it) and, unless --metrics-address is empty, /metrics, /healthz and
// /readyz.

#include <prometheus/collectable.h>

#include <memory>
#include <vector>

#include <grpcpp/server.h>

#include "agent/daemon_options.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "driver/node_service.h"
#include "status/agent_health.h"
#include "status/agent_service.h"
#include "status/metrics.h"

namespace stagehand::agent {

class Reporting {
 public:
  struct Parts {
    status::AgentHealth::Sources health;
    status::AgentInfo info;
    // The built-in driver: what serves its volumes (and, without a reconciler, which they are).
    driver::NodeService* node = nullptr;
    // What /metrics exports; the collectables must be thread-safe.
    std::vector<std::shared_ptr<prometheus::Collectable>> metrics;
  };

  // Everything `parts` points to must outlive the reporting.
  static absl::StatusOr<std::unique_ptr<Reporting>> Start(const DaemonOptions& options,
                                                          Parts parts);

  // Stops the metrics endpoint, then the agent API (calls in flight get 2 s), and removes its
  // socket.
  ~Reporting();
  Reporting(const Reporting&) = delete;
  Reporting& operator=(const Reporting&) = delete;

  const status::AgentHealth& health() const { return *health_; }

  // Stops the metrics endpoint first: what it reads may go before the agent API does.
  void StopMetrics() { metrics_server_.reset(); }

 private:
  explicit Reporting(std::string agent_socket) : agent_socket_(std::move(agent_socket)) {}

  const std::string agent_socket_;
  std::unique_ptr<status::AgentHealth> health_;
  std::unique_ptr<status::AgentService> agent_service_;
  UniqueFd agent_socket_lock_;
  std::unique_ptr<grpc::Server> agent_server_;
  std::unique_ptr<status::MetricsServer> metrics_server_;
};

}  // namespace stagehand::agent

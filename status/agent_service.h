#pragma once

// The agent API (proto/agent.proto): status, volumes and plugins, read from the reconciler, the
// plugin registry and the registrar through AgentHealth. Thread-safe.

#include <atomic>
#include <string>
#include <vector>

#include "driver/node_service.h"
#include "proto/agent.grpc.pb.h"
#include "reconciler/reconciler.h"
#include "registration/registry.h"
#include "status/agent_health.h"

namespace stagehand::status {

struct AgentInfo {
  std::string version;
  std::string mode;
  std::string node_id;
  std::string driver_name;
  std::string manifest_dir;
  std::string session_launcher;
  std::string iscsi_transport;  // The default: "kernel" or "userspace".
  // Found at start and true until the agent restarts (a broken session binary).
  std::vector<std::string> problems;
};

class AgentService final : public agent::v1::Agent::Service {
 public:
  // Reads the reconciler, the registry, the manifests and the registrar from `health`'s
  // sources, which must outlive the service. Without a reconciler (Kubernetes mode, or an agent
  // that only serves the driver) the volumes listed are the built-in driver's, from `driver`;
  // with one, `driver` (if any) tells what serves its volumes' data paths.
  AgentService(AgentInfo info, const AgentHealth& health, driver::NodeService* driver = nullptr)
      : info_(std::move(info)),
        health_(health),
        reconciler_(health.sources().reconciler),
        registry_(health.sources().registry),
        driver_(driver) {}

  // The bound metrics port, once known.
  void set_metrics_port(int port) { metrics_port_ = port; }

  grpc::Status GetStatus(grpc::ServerContext* context, const agent::v1::GetStatusRequest* request,
                         agent::v1::AgentStatus* response) override;
  grpc::Status ListVolumes(grpc::ServerContext* context,
                           const agent::v1::ListVolumesRequest* request,
                           agent::v1::ListVolumesResponse* response) override;
  grpc::Status ListPlugins(grpc::ServerContext* context,
                           const agent::v1::ListPluginsRequest* request,
                           agent::v1::ListPluginsResponse* response) override;

 private:
  const AgentInfo info_;
  const AgentHealth& health_;
  const reconciler::Reconciler* const reconciler_;
  const registration::Registry* const registry_;
  driver::NodeService* const driver_;
  std::atomic<int> metrics_port_{0};
};

// The agent-API view of a reconciler status.
void ToProto(const reconciler::ReconcilerStatus& status, agent::v1::ListVolumesResponse* out);

}  // namespace stagehand::status

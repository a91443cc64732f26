#pragma once

// The agent API (proto/agent.proto): status, volumes and plugins, read from the reconciler, the
// plugin registry and the registrar. Thread-safe.

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "proto/agent.grpc.pb.h"
#include "reconciler/reconciler.h"
#include "registration/registry.h"

namespace stagehand::agent {

struct AgentInfo {
  std::string version;
  std::string mode;
  std::string node_id;
  std::string driver_name;
  std::string manifest_dir;
  std::string session_launcher;
  std::string iscsi_transport;  // The default: "kernel" or "userspace".
};

class AgentService final : public stagehand::agent::v1::Agent::Service {
 public:
  // `reconciler` and `registry` may be null (Kubernetes mode); they must outlive the service.
  AgentService(AgentInfo info, reconciler::Reconciler* reconciler,
               const registration::Registry* registry,
               std::function<state::v1::RegistrarState()> registrar)
      : info_(std::move(info)),
        reconciler_(reconciler),
        registry_(registry),
        registrar_(std::move(registrar)) {}

  // The bound metrics port, once known.
  void set_metrics_port(int port) { metrics_port_ = port; }

  // Why the manifest directory's state is unknown, if it is (a problem in GetStatus).
  // REQUIRES: called before the service is registered with a server.
  void set_manifest_problem(std::function<std::optional<std::string>()> problem) {
    manifest_problem_ = std::move(problem);
  }

  grpc::Status GetStatus(grpc::ServerContext* context, const v1::GetStatusRequest* request,
                         v1::AgentStatus* response) override;
  grpc::Status ListVolumes(grpc::ServerContext* context, const v1::ListVolumesRequest* request,
                           v1::ListVolumesResponse* response) override;
  grpc::Status ListPlugins(grpc::ServerContext* context, const v1::ListPluginsRequest* request,
                           v1::ListPluginsResponse* response) override;

 private:
  AgentInfo info_;
  reconciler::Reconciler* reconciler_;
  const registration::Registry* registry_;
  std::function<state::v1::RegistrarState()> registrar_;
  std::atomic<int> metrics_port_{0};
  std::function<std::optional<std::string>()> manifest_problem_;
};

// The agent-API view of a reconciler status.
void ToProto(const reconciler::ReconcilerStatus& status, v1::ListVolumesResponse* out);

}  // namespace stagehand::agent

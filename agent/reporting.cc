#include "agent/reporting.h"

#include <chrono>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "base/file_io.h"
#include "base/lock_file.h"
#include "base/log.h"
#include "proto/unix_grpc_server.h"

namespace stagehand::agent {
namespace {

constexpr LogComponent kComponent = LogComponent::kAgent;

}  // namespace

absl::StatusOr<std::unique_ptr<Reporting>> Reporting::Start(const DaemonOptions& options,
                                                            Parts parts) {
  std::unique_ptr<Reporting> r(new Reporting(options.agent_socket));
  r->health_ = std::make_unique<status::AgentHealth>(std::move(parts.health));
  r->agent_service_ =
      std::make_unique<status::AgentService>(std::move(parts.info), *r->health_, parts.node);
  SH_ASSIGN_OR_RETURN(r->agent_socket_lock_, LockFile(absl::StrCat(options.agent_socket, ".lock")));
  // Owner only, as the CSI socket and the README say.
  auto served = ServeOnUnixSocket(options.agent_socket, {r->agent_service_.get()});
  if (!served.ok()) {
    return WithContext(served.status(), "agent socket");
  }
  r->agent_server_ = std::move(*served);
  Log(kComponent)
      .info("agent API on '{}'{}", options.agent_socket,
            r->health_->sources().reconciler != nullptr
                ? absl::StrCat("; volumes declared in '", options.manifest_dir, "'")
                : "");
  if (options.metrics_address.empty()) {
    return r;
  }
  const status::AgentHealth* health = r->health_.get();
  SH_ASSIGN_OR_RETURN(r->metrics_server_, status::MetricsServer::Start(
                                              options.metrics_address, std::move(parts.metrics),
                                              {[health] { return health->Live(); },
                                               [health] { return health->Ready(); },
                                               [health] { return health->VolumeProblems(); }},
                                              options.metrics_tls));
  r->agent_service_->set_metrics_port(r->metrics_server_->port());
  Log(kComponent)
      .info("metrics on {} port {} (/metrics, /healthz, /readyz){}", options.metrics_address,
            r->metrics_server_->port(),
            !options.metrics_tls.enabled()               ? ""
            : options.metrics_tls.client_ca_file.empty() ? " over TLS"
                                                         : " over TLS, /metrics for clients "
                                                           "of the client CA");
  return r;
}

Reporting::~Reporting() {
  metrics_server_.reset();
  if (agent_server_) {
    agent_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    agent_server_->Wait();
    agent_server_.reset();
    (void)RemoveFileIfExists(agent_socket_);
  }
}

}  // namespace stagehand::agent

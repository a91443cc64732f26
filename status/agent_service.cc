#include "status/agent_service.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <absl/strings/str_cat.h>
#include <absl/time/clock.h>
#include <absl/time/time.h>

#include "base/time_format.h"
#include "status/agent_health.h"
#include "status/driver_volumes.h"

namespace stagehand::status {

void ToProto(const reconciler::ReconcilerStatus& status, agent::v1::ListVolumesResponse* out) {
  out->set_generation(status.generation);
  out->set_ready(status.ready);
  for (const auto& v : status.volumes) {
    auto* p = out->add_volumes();
    p->set_name(v.name);
    p->set_manifest_file(v.manifest_file);
    p->set_declared(v.declared);
    p->set_driver(v.driver);
    p->set_volume_handle(v.volume_handle);
    p->set_staging_path(v.staging_path);
    p->set_phase(std::string(reconciler::VolumePhaseName(v.phase)));
    p->set_stage_state(v.stage_state);
    for (const auto& t : v.targets) {
      auto* target = p->add_targets();
      target->set_target_path(t.target_path);
      target->set_read_only(t.read_only);
      target->set_state(t.state);
    }
    p->set_in_flight(v.in_flight);
    p->set_manifest_error(v.manifest_error);
    p->set_blocked(v.blocked);
    p->set_last_error(v.last_error);
    p->set_condition(v.condition);
    p->set_attempts(v.attempts);
    if (v.next_retry) {
      p->set_next_retry(FormatRfc3339(*v.next_retry));
    }
  }
  out->mutable_manifest_errors()->insert(status.manifest_errors.begin(),
                                         status.manifest_errors.end());
}

grpc::Status AgentService::GetStatus(grpc::ServerContext*, const agent::v1::GetStatusRequest*,
                                     agent::v1::AgentStatus* response) {
  response->set_version(info_.version);
  response->set_mode(info_.mode);
  response->set_session_launcher(info_.session_launcher);
  response->set_iscsi_transport(info_.iscsi_transport);
  response->set_node_id(info_.node_id);
  response->set_driver_name(info_.driver_name);
  response->set_manifest_dir(info_.manifest_dir);
  response->set_metrics_port(metrics_port_.load());
  for (const std::string& problem : info_.problems) {
    response->add_problems(problem);
  }
  if (const registration::RegistrarRecord* registrar = health_.sources().registrar;
      registrar != nullptr) {
    *response->mutable_registrar() = registrar->Get();
    if (!response->registrar().last_error().empty()) {
      response->add_problems(absl::StrCat("the built-in driver's registration was rejected: ",
                                          response->registrar().last_error()));
    }
  }
  if (auto problem = health_.ManifestProblem(); problem) {
    response->add_problems(*problem);
  }
  if (reconciler_ != nullptr) {
    const auto status = reconciler_->Status();
    const VolumeCounts counts = CountVolumes(status.volumes);
    response->set_volumes(counts.total);
    response->set_volumes_published(counts.published);
    response->set_volumes_failing(counts.failing);
    for (auto& problem : health_.VolumeProblems()) {
      response->add_problems(std::move(problem));
    }
    for (const auto& v : status.volumes) {
      if (!v.manifest_error.empty()) {
        (*response->mutable_manifest_errors())[v.manifest_file] = v.manifest_error;
      }
    }
    for (const auto& [file, error] : status.manifest_errors) {
      (*response->mutable_manifest_errors())[file] = error;
    }
    for (const auto& [file, error] : response->manifest_errors()) {
      response->add_problems(absl::StrCat("manifest '", file, "': ", error));
    }
    for (const auto& e : status.store_errors) {
      response->add_problems(absl::StrCat("unreadable volume record: ", e));
    }
  }
  if (reconciler_ == nullptr && driver_ != nullptr) {
    agent::v1::ListVolumesResponse volumes;
    std::vector<std::string> problems;
    ListDriverVolumes(*driver_, info_.driver_name, &volumes, &problems);
    for (const auto& v : volumes.volumes()) {
      response->set_volumes(response->volumes() + 1);
      response->set_volumes_published(response->volumes_published() +
                                      (v.phase() == "published" ? 1 : 0));
      response->set_volumes_failing(response->volumes_failing() + (v.condition().empty() ? 0 : 1));
    }
    for (auto& p : problems) {
      response->add_problems(std::move(p));
    }
  }
  if (registry_ != nullptr) {
    for (const auto& p : registry_->List()) {
      response->set_plugins(response->plugins() + 1);
      if (!p.healthy()) {
        response->set_plugins_unhealthy(response->plugins_unhealthy() + 1);
        response->add_problems(
            absl::StrCat("plugin '", p.name(), "' is unhealthy: ", p.last_error()));
      }
    }
  }
  const absl::Status ready = health_.Ready();
  response->set_ready(ready.ok());
  response->set_not_ready_reason(std::string(ready.message()));
  return grpc::Status::OK;
}

grpc::Status AgentService::ListVolumes(grpc::ServerContext* context,
                                       const agent::v1::ListVolumesRequest* request,
                                       agent::v1::ListVolumesResponse* response) {
  if (reconciler_ == nullptr) {
    if (driver_ == nullptr) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "this agent lists no volumes");
    }
    // Nothing to wait for here: a watcher asks again after at most `wait_ms` (1 s slices).
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(std::min<uint32_t>(request->wait_ms(), 60'000));
    while (request->after_generation() >= 1 && !context->IsCancelled() &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::min(std::chrono::duration_cast<std::chrono::milliseconds>(
                                               until - std::chrono::steady_clock::now()),
                                           std::chrono::milliseconds(1000)));
    }
    std::vector<std::string> problems;
    ListDriverVolumes(*driver_, info_.driver_name, response, &problems);
    return grpc::Status::OK;
  }
  const auto wait = std::chrono::milliseconds(std::min<uint32_t>(request->wait_ms(), 60'000));
  auto status = reconciler_->Status();
  if (request->wait_ms() > 0 && status.generation <= request->after_generation()) {
    // In slices, so that a client that went away or a shutting-down server (which cancels
    // pending calls) ends the wait within a second rather than after up to a minute.
    const auto until = std::chrono::steady_clock::now() + wait;
    while (status.generation <= request->after_generation() && !context->IsCancelled()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        break;
      }
      status = reconciler_->WaitForChange(request->after_generation(),
                                          std::min(left, std::chrono::milliseconds(1000)));
    }
    if (status.generation > request->after_generation()) {
      // Changes come in bursts (a thousand manifests at once): answer a watcher at most every
      // 50 ms, so that watching costs the agent a bounded amount of work.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      status = reconciler_->Status();
    }
  }
  ToProto(status, response);
  if (driver_ != nullptr) {
    AddDataPaths(*driver_, info_.driver_name, response);
  }
  return grpc::Status::OK;
}

grpc::Status AgentService::ListPlugins(grpc::ServerContext*, const agent::v1::ListPluginsRequest*,
                                       agent::v1::ListPluginsResponse* response) {
  if (registry_ == nullptr) {
    return grpc::Status::OK;
  }
  const auto snapshot = registry_->Snapshot();
  *response->mutable_plugins() = snapshot.plugins();
  *response->mutable_pending() = snapshot.pending();
  return grpc::Status::OK;
}

}  // namespace stagehand::status

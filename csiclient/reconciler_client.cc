#include "csiclient/reconciler_client.h"

#include <algorithm>

#include <absl/strings/str_cat.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "csiclient/capability.h"

namespace stagehand::csiclient {

absl::Status ReconcilerClient::Stage(const reconciler::StageCall& call,
                                     std::chrono::milliseconds timeout) {
  SH_RETURN_IF_ERROR(MakeDirs(call.staging_path, 0750));
  csi::v1::NodeStageVolumeRequest request;
  request.set_volume_id(call.volume_handle);
  request.set_staging_target_path(call.staging_path);
  FillCapability(call.capability, request.mutable_volume_capability());
  request.mutable_volume_context()->insert(call.volume_context.begin(), call.volume_context.end());
  request.mutable_publish_context()->insert(call.publish_context.begin(),
                                            call.publish_context.end());
  if (!call.secrets_file.empty()) {
    auto secrets = load_secrets_ ? load_secrets_(call.secrets_file)
                                 : absl::FailedPreconditionError("no secrets loader");
    if (!secrets.ok()) {
      return WithContext(secrets.status(), "secretsFile");
    }
    request.mutable_secrets()->insert(secrets->begin(), secrets->end());
  }
  return node_->Stage(request, timeout).status();
}

absl::Status ReconcilerClient::Unstage(const std::string& volume_handle,
                                       const std::string& staging_path,
                                       std::chrono::milliseconds timeout) {
  csi::v1::NodeUnstageVolumeRequest request;
  request.set_volume_id(volume_handle);
  request.set_staging_target_path(staging_path);
  return node_->Unstage(request, timeout).status();
}

absl::Status ReconcilerClient::Publish(const reconciler::PublishCall& call,
                                       std::chrono::milliseconds timeout) {
  SH_RETURN_IF_ERROR(MakeDirs(ParentDir(call.target_path), 0750));
  csi::v1::NodePublishVolumeRequest request;
  request.set_volume_id(call.volume_handle);
  request.set_staging_target_path(call.staging_path);
  request.set_target_path(call.target_path);
  request.set_readonly(call.read_only);
  FillCapability(call.capability, request.mutable_volume_capability());
  request.mutable_volume_context()->insert(call.volume_context.begin(), call.volume_context.end());
  request.mutable_publish_context()->insert(call.publish_context.begin(),
                                            call.publish_context.end());
  return node_->Publish(request, timeout).status();
}

absl::Status ReconcilerClient::Unpublish(const std::string& volume_handle,
                                         const std::string& target_path,
                                         std::chrono::milliseconds timeout) {
  csi::v1::NodeUnpublishVolumeRequest request;
  request.set_volume_id(volume_handle);
  request.set_target_path(target_path);
  return node_->Unpublish(request, timeout).status();
}

absl::Status ReconcilerClient::GetVolumeStats(const std::string& volume_handle,
                                              const std::string& path,
                                              std::chrono::milliseconds timeout,
                                              VolumeStatsSample& out) {
  csi::v1::NodeGetVolumeStatsRequest request;
  request.set_volume_id(volume_handle);
  request.set_volume_path(path);
  SH_ASSIGN_OR_RETURN(csi::v1::NodeGetVolumeStatsResponse response,
                      node_->GetVolumeStats(request, timeout));
  FillStats(response, out);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<VolumeHealthProblem>> ReconcilerClient::GetVolumeHealth(
    const std::string& volume_handle, const std::string& staging_path,
    const std::string& publish_path, std::chrono::milliseconds timeout) {
  csi::v1::NodeGetVolumeHealthRequest request;
  request.set_volume_id(volume_handle);
  request.set_staging_target_path(staging_path);
  request.set_volume_publish_path(publish_path);
  SH_ASSIGN_OR_RETURN(csi::v1::NodeGetVolumeHealthResponse response,
                      node_->GetVolumeHealth(request, timeout));
  return ProblemsOf(response.volume_health());
}

absl::StatusOr<std::shared_ptr<reconciler::NodeClient>> RegistryDriverDirectory::Find(
    const std::string& driver) {
  SH_ASSIGN_OR_RETURN(auto client, FindClient(driver));
  return std::static_pointer_cast<reconciler::NodeClient>(client);
}

bool RegistryDriverDirectory::AnswersVolumeHealth(const std::string& driver) const {
  auto plugin = registry_.Find(driver);
  return plugin && plugin->healthy() &&
         std::find(plugin->node_capabilities().begin(), plugin->node_capabilities().end(),
                   "GET_VOLUME_HEALTH") != plugin->node_capabilities().end();
}

absl::StatusOr<std::shared_ptr<ReconcilerClient>> RegistryDriverDirectory::FindClient(
    const std::string& driver) {
  auto plugin = registry_.Find(driver);
  if (!plugin) {
    return absl::FailedPreconditionError(
        absl::StrCat("driver '", driver,
                     "' is not registered (no healthy registration socket "
                     "for it in the registration directory)"));
  }
  if (!plugin->healthy()) {
    return absl::FailedPreconditionError(
        absl::StrCat("driver '", driver, "' is unhealthy: ", plugin->last_error()));
  }
  MutexLock lock(mu_);
  auto& client = clients_[driver];
  if (!client || client->endpoint() != plugin->endpoint()) {
    client = std::make_shared<ReconcilerClient>(
        std::make_shared<csiclient::NodeClient>(
            driver, plugin->endpoint(),
            NodeClient::Options{
                .observer = observer_, .canceller = canceller_, .wait_for_ready = true}),
        load_secrets_);
  }
  return client;
}

}  // namespace stagehand::csiclient

#include "standalone/csi_node_client.h"

#include <algorithm>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <grpcpp/grpcpp.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "health/reason.h"
#include "proto/csi.grpc.pb.h"
#include "proto/grpc_status.h"
#include "standalone/manifest.h"

namespace stagehand::standalone {
namespace {

using csi::v1::VolumeCapability;

VolumeCapability::AccessMode::Mode ToCsi(reconciler::AccessMode mode) {
  using M = VolumeCapability::AccessMode;
  switch (mode) {
    case reconciler::AccessMode::kSingleNodeWriter:
      return M::SINGLE_NODE_WRITER;
    case reconciler::AccessMode::kSingleNodeReaderOnly:
      return M::SINGLE_NODE_READER_ONLY;
    case reconciler::AccessMode::kSingleNodeSingleWriter:
      return M::SINGLE_NODE_SINGLE_WRITER;
    case reconciler::AccessMode::kSingleNodeMultiWriter:
      return M::SINGLE_NODE_MULTI_WRITER;
    case reconciler::AccessMode::kMultiNodeReaderOnly:
      return M::MULTI_NODE_READER_ONLY;
    case reconciler::AccessMode::kMultiNodeSingleWriter:
      return M::MULTI_NODE_SINGLE_WRITER;
    case reconciler::AccessMode::kMultiNodeMultiWriter:
      return M::MULTI_NODE_MULTI_WRITER;
  }
  return M::UNKNOWN;
}

void FillCapability(const reconciler::Capability& cap, VolumeCapability* out) {
  if (cap.block) {
    out->mutable_block();
  } else {
    auto* mount = out->mutable_mount();
    mount->set_fs_type(cap.fs_type);
    for (const auto& f : cap.mount_flags) {
      mount->add_mount_flags(f);
    }
  }
  out->mutable_access_mode()->set_mode(ToCsi(cap.access_mode));
}

std::unique_ptr<grpc::ClientContext> Context(std::chrono::milliseconds timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  // A driver that restarts briefly is waited for, within the deadline.
  context->set_wait_for_ready(true);
  return context;
}

}  // namespace

std::vector<VolumeHealthProblem> ProblemsOf(const csi::v1::VolumeHealth& health) {
  std::vector<VolumeHealthProblem> problems;
  for (const auto& entry : health.health_statuses()) {
    VolumeHealthProblem p;
    p.status = csi::v1::VolumeHealthErrorType_Name(entry.status());
    p.reason = entry.reason().empty() ? p.status : entry.reason();
    p.message = entry.message();
    if (auto known = health::ReasonNamed(p.reason)) {
      p.heals = health::Info(*known).heals;
    }
    problems.push_back(std::move(p));
  }
  return problems;
}

std::string DescribeProblems(const std::vector<VolumeHealthProblem>& problems) {
  std::vector<std::string> parts;
  for (const auto& p : problems) {
    parts.push_back(p.message.empty() ? p.reason : absl::StrCat(p.reason, ": ", p.message));
  }
  return absl::StrJoin(parts, "; ");
}

bool CallCanceller::Add(grpc::ClientContext* context) {
  MutexLock lock(mu_);
  if (cancelled_) {
    return false;
  }
  live_.insert(context);
  return true;
}

void CallCanceller::Remove(grpc::ClientContext* context) {
  MutexLock lock(mu_);
  live_.erase(context);
}

void CallCanceller::CancelAll() {
  MutexLock lock(mu_);
  cancelled_ = true;
  for (grpc::ClientContext* context : live_) {
    context->TryCancel();
  }
}

CsiNodeClient::CsiNodeClient(std::string driver, std::string endpoint, CallObserver* metrics,
                             std::shared_ptr<CallCanceller> canceller)
    : driver_(std::move(driver)),
      endpoint_(std::move(endpoint)),
      metrics_(metrics),
      canceller_(std::move(canceller)) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  channel_ = grpc::CreateCustomChannel(absl::StrCat("unix:", endpoint_),
                                       grpc::InsecureChannelCredentials(), args);
}

absl::Status CsiNodeClient::Stage(const reconciler::StageCall& call,
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
    auto secrets = LoadSecretsFile(call.secrets_file);
    if (!secrets.ok()) {
      return WithContext(secrets.status(), "secretsFile");
    }
    request.mutable_secrets()->insert(secrets->begin(), secrets->end());
  }
  csi::v1::Node::Stub stub(channel_);
  csi::v1::NodeStageVolumeResponse response;
  return Invoke("NodeStageVolume", timeout, [&](grpc::ClientContext* context) {
    return stub.NodeStageVolume(context, request, &response);
  });
}

absl::Status CsiNodeClient::Unstage(const std::string& volume_handle,
                                    const std::string& staging_path,
                                    std::chrono::milliseconds timeout) {
  csi::v1::NodeUnstageVolumeRequest request;
  request.set_volume_id(volume_handle);
  request.set_staging_target_path(staging_path);
  csi::v1::Node::Stub stub(channel_);
  csi::v1::NodeUnstageVolumeResponse response;
  return Invoke("NodeUnstageVolume", timeout, [&](grpc::ClientContext* context) {
    return stub.NodeUnstageVolume(context, request, &response);
  });
}

absl::Status CsiNodeClient::Publish(const reconciler::PublishCall& call,
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
  csi::v1::Node::Stub stub(channel_);
  csi::v1::NodePublishVolumeResponse response;
  return Invoke("NodePublishVolume", timeout, [&](grpc::ClientContext* context) {
    return stub.NodePublishVolume(context, request, &response);
  });
}

absl::Status CsiNodeClient::Unpublish(const std::string& volume_handle,
                                      const std::string& target_path,
                                      std::chrono::milliseconds timeout) {
  csi::v1::NodeUnpublishVolumeRequest request;
  request.set_volume_id(volume_handle);
  request.set_target_path(target_path);
  csi::v1::Node::Stub stub(channel_);
  csi::v1::NodeUnpublishVolumeResponse response;
  return Invoke("NodeUnpublishVolume", timeout, [&](grpc::ClientContext* context) {
    return stub.NodeUnpublishVolume(context, request, &response);
  });
}

absl::Status CsiNodeClient::GetVolumeStats(const std::string& volume_handle,
                                           const std::string& path,
                                           std::chrono::milliseconds timeout,
                                           VolumeStatsSample& out) {
  csi::v1::NodeGetVolumeStatsRequest request;
  request.set_volume_id(volume_handle);
  request.set_volume_path(path);
  csi::v1::Node::Stub stub(channel_);
  csi::v1::NodeGetVolumeStatsResponse response;
  SH_RETURN_IF_ERROR(Invoke("NodeGetVolumeStats", timeout, [&](grpc::ClientContext* context) {
    return stub.NodeGetVolumeStats(context, request, &response);
  }));
  for (const auto& usage : response.usage()) {
    if (usage.unit() == csi::v1::VolumeUsage::BYTES) {
      out.capacity_bytes = usage.total();
      out.available_bytes = usage.available();
      out.used_bytes = usage.used();
    } else if (usage.unit() == csi::v1::VolumeUsage::INODES) {
      out.inodes = usage.total();
      out.inodes_free = usage.available();
      out.inodes_used = usage.used();
    }
  }
  out.abnormal = response.has_volume_condition() && response.volume_condition().abnormal();
  if (out.abnormal) {
    out.condition_message = response.volume_condition().message();
  }
  out.answered = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<VolumeHealthProblem>> CsiNodeClient::GetVolumeHealth(
    const std::string& volume_handle, const std::string& staging_path,
    const std::string& publish_path, std::chrono::milliseconds timeout) {
  csi::v1::NodeGetVolumeHealthRequest request;
  request.set_volume_id(volume_handle);
  request.set_staging_target_path(staging_path);
  request.set_volume_publish_path(publish_path);
  csi::v1::Node::Stub stub(channel_);
  csi::v1::NodeGetVolumeHealthResponse response;
  SH_RETURN_IF_ERROR(Invoke("NodeGetVolumeHealth", timeout, [&](grpc::ClientContext* context) {
    return stub.NodeGetVolumeHealth(context, request, &response);
  }));
  return ProblemsOf(response.volume_health());
}

absl::Status CsiNodeClient::Invoke(const char* method, std::chrono::milliseconds timeout,
                                   const std::function<grpc::Status(grpc::ClientContext*)>& rpc) {
  auto context = Context(timeout);
  if (canceller_ && !canceller_->Add(context.get())) {
    return absl::CancelledError(absl::StrCat(method, ": stagehand is shutting down"));
  }
  absl::Cleanup remove = [&] {
    if (canceller_) {
      canceller_->Remove(context.get());
    }
  };
  const auto start = std::chrono::steady_clock::now();
  return Timed(method, start, FromGrpcStatus(rpc(context.get()), method));
}

absl::Status CsiNodeClient::Timed(const char* method, std::chrono::steady_clock::time_point start,
                                  absl::Status s) {
  if (metrics_ != nullptr) {
    metrics_->ObserveCsiCall(driver_, method, s.code(), std::chrono::steady_clock::now() - start);
  }
  return s;
}

absl::StatusOr<std::shared_ptr<reconciler::NodeClient>> RegistryDriverDirectory::Find(
    const std::string& driver) {
  SH_ASSIGN_OR_RETURN(auto client, FindCsi(driver));
  return std::static_pointer_cast<reconciler::NodeClient>(client);
}

bool RegistryDriverDirectory::AnswersVolumeHealth(const std::string& driver) const {
  auto plugin = registry_.Find(driver);
  return plugin && plugin->healthy() &&
         std::find(plugin->node_capabilities().begin(), plugin->node_capabilities().end(),
                   "GET_VOLUME_HEALTH") != plugin->node_capabilities().end();
}

absl::StatusOr<std::shared_ptr<CsiNodeClient>> RegistryDriverDirectory::FindCsi(
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
    client = std::make_shared<CsiNodeClient>(driver, plugin->endpoint(), metrics_, canceller_);
  }
  return client;
}

}  // namespace stagehand::standalone

#include "csiclient/node_client.h"

#include <absl/cleanup/cleanup.h>
#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>

#include "proto/grpc_status.h"

namespace stagehand::csiclient {

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

NodeClient::NodeClient(std::string driver, std::string endpoint, Options options)
    : driver_(std::move(driver)), endpoint_(std::move(endpoint)), options_(std::move(options)) {
  grpc::ChannelArguments args;
  // A driver that restarts is reconnected to quickly. Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS:
  // gRPC reads it as the shortest time one connection attempt is given (20 s by default), and a
  // driver on a loaded node may take longer than a few hundred milliseconds to answer.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  const std::string target =
      endpoint_.starts_with("/") ? absl::StrCat("unix:", endpoint_) : endpoint_;
  channel_ = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  stub_ = csi::v1::Node::NewStub(channel_);
}

template <typename Request, typename Response>
absl::StatusOr<Response> NodeClient::Call(const char* method, Rpc<Request, Response> rpc,
                                          const Request& request, Timeout timeout) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  context.set_wait_for_ready(options_.wait_for_ready);
  CallCanceller* canceller = options_.canceller.get();
  if (canceller != nullptr && !canceller->Add(&context)) {
    return absl::CancelledError(absl::StrCat(method, ": stagehand is shutting down"));
  }
  absl::Cleanup remove = [&] {
    if (canceller != nullptr) {
      canceller->Remove(&context);
    }
  };
  const auto start = std::chrono::steady_clock::now();
  Response response;
  const absl::Status s = FromGrpcStatus(((*stub_).*rpc)(&context, request, &response), method);
  if (options_.observer != nullptr) {
    options_.observer->ObserveCsiCall(driver_, method, s.code(),
                                      std::chrono::steady_clock::now() - start);
  }
  if (!s.ok()) {
    return s;
  }
  return response;
}

absl::StatusOr<csi::v1::NodeGetInfoResponse> NodeClient::GetInfo(Timeout timeout) {
  return Call("NodeGetInfo", &csi::v1::Node::Stub::NodeGetInfo, csi::v1::NodeGetInfoRequest(),
              timeout);
}

absl::StatusOr<csi::v1::NodeGetCapabilitiesResponse> NodeClient::GetCapabilities(Timeout timeout) {
  return Call("NodeGetCapabilities", &csi::v1::Node::Stub::NodeGetCapabilities,
              csi::v1::NodeGetCapabilitiesRequest(), timeout);
}

absl::StatusOr<csi::v1::NodeStageVolumeResponse> NodeClient::Stage(
    const csi::v1::NodeStageVolumeRequest& request, Timeout timeout) {
  return Call("NodeStageVolume", &csi::v1::Node::Stub::NodeStageVolume, request, timeout);
}

absl::StatusOr<csi::v1::NodeUnstageVolumeResponse> NodeClient::Unstage(
    const csi::v1::NodeUnstageVolumeRequest& request, Timeout timeout) {
  return Call("NodeUnstageVolume", &csi::v1::Node::Stub::NodeUnstageVolume, request, timeout);
}

absl::StatusOr<csi::v1::NodePublishVolumeResponse> NodeClient::Publish(
    const csi::v1::NodePublishVolumeRequest& request, Timeout timeout) {
  return Call("NodePublishVolume", &csi::v1::Node::Stub::NodePublishVolume, request, timeout);
}

absl::StatusOr<csi::v1::NodeUnpublishVolumeResponse> NodeClient::Unpublish(
    const csi::v1::NodeUnpublishVolumeRequest& request, Timeout timeout) {
  return Call("NodeUnpublishVolume", &csi::v1::Node::Stub::NodeUnpublishVolume, request, timeout);
}

absl::StatusOr<csi::v1::NodeGetVolumeStatsResponse> NodeClient::GetVolumeStats(
    const csi::v1::NodeGetVolumeStatsRequest& request, Timeout timeout) {
  return Call("NodeGetVolumeStats", &csi::v1::Node::Stub::NodeGetVolumeStats, request, timeout);
}

absl::StatusOr<csi::v1::NodeExpandVolumeResponse> NodeClient::Expand(
    const csi::v1::NodeExpandVolumeRequest& request, Timeout timeout) {
  return Call("NodeExpandVolume", &csi::v1::Node::Stub::NodeExpandVolume, request, timeout);
}

absl::StatusOr<csi::v1::NodeGetVolumeHealthResponse> NodeClient::GetVolumeHealth(
    const csi::v1::NodeGetVolumeHealthRequest& request, Timeout timeout) {
  return Call("NodeGetVolumeHealth", &csi::v1::Node::Stub::NodeGetVolumeHealth, request, timeout);
}

absl::StatusOr<csi::v1::NodeGetStorageHealthResponse> NodeClient::GetStorageHealth(
    Timeout timeout) {
  return Call("NodeGetStorageHealth", &csi::v1::Node::Stub::NodeGetStorageHealth,
              csi::v1::NodeGetStorageHealthRequest(), timeout);
}

}  // namespace stagehand::csiclient

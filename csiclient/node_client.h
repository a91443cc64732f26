#pragma once

// The one CSI Node client: every Node call to a driver's unix socket, each with a deadline, a
// way to cancel it at shutdown, and an observer that times it. The reconciler reaches drivers
// through it (csiclient/reconciler_client.h), and so do stagehandctl's node commands.
//
// Thread-safe: calls may run concurrently from any thread.

#include <chrono>
#include <memory>
#include <set>
#include <string>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include "base/mutex.h"
#include "base/status.h"
#include "proto/csi.grpc.pb.h"

namespace stagehand::csiclient {

// Told of every call a NodeClient makes (the agent's metrics time them). Thread-safe.
class CallObserver {
 public:
  virtual ~CallObserver() = default;
  virtual void ObserveCsiCall(const std::string& driver, const std::string& method,
                              absl::StatusCode code,
                              std::chrono::steady_clock::duration elapsed) = 0;
};

// Cancels the calls in flight and refuses later ones, so that shutdown does not wait for a slow
// driver (a cancelled call counts as uncertain; its record says so). Thread-safe.
class CallCanceller {
 public:
  // Registers a call's context; false when cancelled already (the call must not start).
  bool Add(grpc::ClientContext* context);
  void Remove(grpc::ClientContext* context);
  void CancelAll();

 private:
  Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> live_ ABSL_GUARDED_BY(mu_);
};

class NodeClient {
 public:
  using Timeout = std::chrono::milliseconds;

  struct Options {
    CallObserver* observer = nullptr;  // Told of every call; may be null.
    // Can cancel every call of this client; may be null.
    std::shared_ptr<CallCanceller> canceller;
    // A driver that is not there (yet, or restarting) is waited for, within each call's
    // deadline; false: such a call fails at once with Unavailable.
    bool wait_for_ready = true;
  };

  // `endpoint`: the driver's CSI socket path, or a gRPC target ("unix:/x/csi.sock"). Connects
  // lazily, on the first call.
  NodeClient(std::string driver, std::string endpoint, Options options);

  // Each call returns the driver's answer, or its status as "<Method>: <message>" with the
  // driver's code (gRPC's codes are absl's); DeadlineExceeded after `timeout`; Cancelled after
  // CancelAll.
  absl::StatusOr<csi::v1::NodeGetInfoResponse> GetInfo(Timeout timeout);
  absl::StatusOr<csi::v1::NodeGetCapabilitiesResponse> GetCapabilities(Timeout timeout);
  absl::StatusOr<csi::v1::NodeStageVolumeResponse> Stage(
      const csi::v1::NodeStageVolumeRequest& request, Timeout timeout);
  absl::StatusOr<csi::v1::NodeUnstageVolumeResponse> Unstage(
      const csi::v1::NodeUnstageVolumeRequest& request, Timeout timeout);
  absl::StatusOr<csi::v1::NodePublishVolumeResponse> Publish(
      const csi::v1::NodePublishVolumeRequest& request, Timeout timeout);
  absl::StatusOr<csi::v1::NodeUnpublishVolumeResponse> Unpublish(
      const csi::v1::NodeUnpublishVolumeRequest& request, Timeout timeout);
  absl::StatusOr<csi::v1::NodeGetVolumeStatsResponse> GetVolumeStats(
      const csi::v1::NodeGetVolumeStatsRequest& request, Timeout timeout);
  absl::StatusOr<csi::v1::NodeExpandVolumeResponse> Expand(
      const csi::v1::NodeExpandVolumeRequest& request, Timeout timeout);
  absl::StatusOr<csi::v1::NodeGetVolumeHealthResponse> GetVolumeHealth(
      const csi::v1::NodeGetVolumeHealthRequest& request, Timeout timeout);
  absl::StatusOr<csi::v1::NodeGetStorageHealthResponse> GetStorageHealth(Timeout timeout);

  const std::string& driver() const { return driver_; }

  const std::string& endpoint() const { return endpoint_; }

 private:
  template <typename Request, typename Response>
  using Rpc = grpc::Status (csi::v1::Node::Stub::*)(grpc::ClientContext*, const Request&,
                                                    Response*);

  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(const char* method, Rpc<Request, Response> rpc,
                                const Request& request, Timeout timeout);

  std::string driver_;
  std::string endpoint_;
  Options options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<csi::v1::Node::Stub> stub_;
};

}  // namespace stagehand::csiclient

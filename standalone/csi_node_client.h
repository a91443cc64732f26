#pragma once

// The reconciler's NodeClient over CSI gRPC to a driver's unix socket, and the DriverDirectory
// that hands out clients for the drivers the plugin registry holds (registered and healthy).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include "base/mutex.h"
#include "proto/csi.pb.h"
#include "reconciler/node_client.h"
#include "registration/registry.h"

namespace stagehand::standalone {

// One entry of a NodeGetVolumeHealth answer.
struct VolumeHealthProblem {
  std::string status;  // "DEGRADED", "INACCESSIBLE", "DATA_LOSS".
  std::string reason;  // CamelCase; the status when the driver gave none.
  std::string message;
  // Whether it goes away by itself, for the reasons stagehand's own driver gives
  // (health/reason.h); nullopt for another driver's.
  std::optional<bool> heals;
};

// The entries of a NodeGetVolumeHealth answer.
std::vector<VolumeHealthProblem> ProblemsOf(const csi::v1::VolumeHealth& health);

// "Reason: message; Reason: message" (the condition people read); empty for no problems.
std::string DescribeProblems(const std::vector<VolumeHealthProblem>& problems);

// One volume's problems as the last health round found them (metrics).
struct VolumeHealthSample {
  std::string driver;
  std::string volume;
  std::vector<VolumeHealthProblem> problems;
};

// One volume target's answer to NodeGetVolumeStats.
struct VolumeStatsSample {
  std::string driver;
  std::string volume;
  std::string target;
  int64_t capacity_bytes = -1;  // -1: not reported.
  int64_t available_bytes = -1;
  int64_t used_bytes = -1;
  int64_t inodes = -1;
  int64_t inodes_free = -1;
  int64_t inodes_used = -1;
  bool abnormal = false;
  std::string condition_message;  // The driver's volume condition message, when abnormal.
  bool answered = false;          // NodeGetVolumeStats succeeded (the fields above are real).
};

// Told of every call a CsiNodeClient makes (the agent's metrics time them). Thread-safe.
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

class CsiNodeClient final : public reconciler::NodeClient {
 public:
  // `endpoint`: the driver's CSI socket path. `metrics` (may be null) is told of every call.
  // `canceller` (may be null) can cancel every call of this client.
  CsiNodeClient(std::string driver, std::string endpoint, CallObserver* metrics = nullptr,
                std::shared_ptr<CallCanceller> canceller = nullptr);

  // Creates the staging directory (the CO's duty), loads the secrets file, calls NodeStageVolume.
  absl::Status Stage(const reconciler::StageCall& call, std::chrono::milliseconds timeout) override;
  absl::Status Unstage(const std::string& volume_handle, const std::string& staging_path,
                       std::chrono::milliseconds timeout) override;
  // Creates the target's parent directory (the CO's duty), calls NodePublishVolume.
  absl::Status Publish(const reconciler::PublishCall& call,
                       std::chrono::milliseconds timeout) override;
  absl::Status Unpublish(const std::string& volume_handle, const std::string& target_path,
                         std::chrono::milliseconds timeout) override;

  // NodeGetVolumeStats into `out` (bytes, inodes, condition); errors leave `out` as it is.
  absl::Status GetVolumeStats(const std::string& volume_handle, const std::string& path,
                              std::chrono::milliseconds timeout, VolumeStatsSample& out);

  // NodeGetVolumeHealth (CSI 1.13): what is wrong with the volume; empty when it is healthy.
  // `publish_path` may be empty.
  absl::StatusOr<std::vector<VolumeHealthProblem>> GetVolumeHealth(
      const std::string& volume_handle, const std::string& staging_path,
      const std::string& publish_path, std::chrono::milliseconds timeout);

  const std::string& endpoint() const { return endpoint_; }

 private:
  absl::Status Timed(const char* method, std::chrono::steady_clock::time_point start,
                     absl::Status s);
  // Runs one call with a context that expires after `timeout` and that CancelAll cancels.
  absl::Status Invoke(const char* method, std::chrono::milliseconds timeout,
                      const std::function<grpc::Status(grpc::ClientContext*)>& rpc);

  std::string driver_;
  std::string endpoint_;
  CallObserver* metrics_;
  std::shared_ptr<CallCanceller> canceller_;
  std::shared_ptr<grpc::Channel> channel_;
};

class RegistryDriverDirectory final : public reconciler::DriverDirectory {
 public:
  explicit RegistryDriverDirectory(const registration::Registry& registry,
                                   CallObserver* metrics = nullptr)
      : registry_(registry), metrics_(metrics) {}

  absl::StatusOr<std::shared_ptr<reconciler::NodeClient>> Find(const std::string& driver) override;
  absl::StatusOr<std::shared_ptr<CsiNodeClient>> FindCsi(const std::string& driver);
  // The driver is registered and said it answers NodeGetVolumeHealth (GET_VOLUME_HEALTH).
  bool AnswersVolumeHealth(const std::string& driver) const;

  // On shutdown: cancels every call in flight through these clients and fails later ones.
  void CancelAll() { canceller_->CancelAll(); }

 private:
  const registration::Registry& registry_;
  CallObserver* metrics_;
  std::shared_ptr<CallCanceller> canceller_ = std::make_shared<CallCanceller>();
  Mutex mu_;
  // By driver name.
  std::map<std::string, std::shared_ptr<CsiNodeClient>> clients_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagehand::standalone

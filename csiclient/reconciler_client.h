#pragma once

// The reconciler's NodeClient over the CSI node client, and the DriverDirectory that hands out
// clients for the drivers the plugin registry holds (registered and healthy).

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "base/mutex.h"
#include "csiclient/node_client.h"
#include "csiclient/volume_health.h"
#include "reconciler/node_client.h"
#include "registration/registry.h"

namespace stagehand::csiclient {

// Reads a volume's stage secrets from its secrets file (never kept past the call).
using SecretsLoader =
    std::function<absl::StatusOr<std::map<std::string, std::string>>(const std::string& path)>;

class ReconcilerClient final : public reconciler::NodeClient {
 public:
  // `node` makes the calls; `load_secrets` reads a StageCall's secrets file.
  ReconcilerClient(std::shared_ptr<csiclient::NodeClient> node, SecretsLoader load_secrets)
      : node_(std::move(node)), load_secrets_(std::move(load_secrets)) {}

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

  const std::string& endpoint() const { return node_->endpoint(); }

 private:
  std::shared_ptr<csiclient::NodeClient> node_;
  SecretsLoader load_secrets_;
};

class RegistryDriverDirectory final : public reconciler::DriverDirectory {
 public:
  // `registry` must outlive the directory; `observer` (may be null) times every call.
  RegistryDriverDirectory(const registration::Registry& registry, SecretsLoader load_secrets,
                          CallObserver* observer = nullptr)
      : registry_(registry), load_secrets_(std::move(load_secrets)), observer_(observer) {}

  absl::StatusOr<std::shared_ptr<reconciler::NodeClient>> Find(const std::string& driver) override;
  absl::StatusOr<std::shared_ptr<ReconcilerClient>> FindClient(const std::string& driver);
  // The driver is registered and said it answers NodeGetVolumeHealth (GET_VOLUME_HEALTH).
  bool AnswersVolumeHealth(const std::string& driver) const;

  // On shutdown: cancels every call in flight through these clients and fails later ones.
  void CancelAll() { canceller_->CancelAll(); }

 private:
  const registration::Registry& registry_;
  SecretsLoader load_secrets_;
  CallObserver* observer_;
  std::shared_ptr<CallCanceller> canceller_ = std::make_shared<CallCanceller>();
  Mutex mu_;
  // By driver name.
  std::map<std::string, std::shared_ptr<ReconcilerClient>> clients_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagehand::csiclient

#pragma once

// The CSI Node service of the built-in iSCSI driver: it validates a request, converts it to
// domain values, takes the volume's lock, runs the operation and maps the outcome to the code the
// CSI spec names. The staging pipeline is VolumeStager, the usable-or-not checks VolumeHealth, the
// LUN claims lun_claims.h and the target-path checks target_path.h. Thread-safe: gRPC calls it
// from many threads; one operation per volume runs at a time (others get ABORTED).

#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "driver/node_options.h"
#include "driver/volume_health.h"
#include "driver/volume_locks.h"
#include "driver/volume_stager.h"
#include "driver/volume_store.h"
#include "health/reason.h"
#include "proto/csi.grpc.pb.h"

namespace stagehand::driver {

// One problem of a staged volume, as CSI v1.13 reports it.
struct VolumeProblem {
  health::Reason reason;
  std::string message;  // What is wrong and what to do.
};

class NodeService final : public csi::v1::Node::Service {
 public:
  // `deps` must outlive the service.
  NodeService(NodeServiceDeps deps, NodeServiceOptions options);

  grpc::Status NodeStageVolume(grpc::ServerContext* ctx, const csi::v1::NodeStageVolumeRequest* req,
                               csi::v1::NodeStageVolumeResponse* resp) override;
  grpc::Status NodeUnstageVolume(grpc::ServerContext* ctx,
                                 const csi::v1::NodeUnstageVolumeRequest* req,
                                 csi::v1::NodeUnstageVolumeResponse* resp) override;
  grpc::Status NodePublishVolume(grpc::ServerContext* ctx,
                                 const csi::v1::NodePublishVolumeRequest* req,
                                 csi::v1::NodePublishVolumeResponse* resp) override;
  grpc::Status NodeUnpublishVolume(grpc::ServerContext* ctx,
                                   const csi::v1::NodeUnpublishVolumeRequest* req,
                                   csi::v1::NodeUnpublishVolumeResponse* resp) override;
  grpc::Status NodeGetVolumeStats(grpc::ServerContext* ctx,
                                  const csi::v1::NodeGetVolumeStatsRequest* req,
                                  csi::v1::NodeGetVolumeStatsResponse* resp) override;
  grpc::Status NodeGetVolumeHealth(grpc::ServerContext* ctx,
                                   const csi::v1::NodeGetVolumeHealthRequest* req,
                                   csi::v1::NodeGetVolumeHealthResponse* resp) override;
  grpc::Status NodeGetStorageHealth(grpc::ServerContext* ctx,
                                    const csi::v1::NodeGetStorageHealthRequest* req,
                                    csi::v1::NodeGetStorageHealthResponse* resp) override;
  grpc::Status NodeExpandVolume(grpc::ServerContext* ctx,
                                const csi::v1::NodeExpandVolumeRequest* req,
                                csi::v1::NodeExpandVolumeResponse* resp) override;
  grpc::Status NodeGetCapabilities(grpc::ServerContext* ctx,
                                   const csi::v1::NodeGetCapabilitiesRequest* req,
                                   csi::v1::NodeGetCapabilitiesResponse* resp) override;
  grpc::Status NodeGetInfo(grpc::ServerContext* ctx, const csi::v1::NodeGetInfoRequest* req,
                           csi::v1::NodeGetInfoResponse* resp) override;

  // The operations behind the RPCs, as absl::Status (for tests and the logging wrapper).
  absl::Status Stage(const csi::v1::NodeStageVolumeRequest& req);
  absl::Status Unstage(const csi::v1::NodeUnstageVolumeRequest& req);
  absl::Status Publish(const csi::v1::NodePublishVolumeRequest& req);
  absl::Status Unpublish(const csi::v1::NodeUnpublishVolumeRequest& req);
  absl::Status Stats(const csi::v1::NodeGetVolumeStatsRequest& req,
                     csi::v1::NodeGetVolumeStatsResponse* resp);
  // The volume's problems at the paths asked for (all of its paths when none is given).
  absl::Status Health(const csi::v1::NodeGetVolumeHealthRequest& req,
                      csi::v1::NodeGetVolumeHealthResponse* resp);
  // The targets this node's staged volumes use that are unreachable or have lost paths.
  absl::Status StorageHealth(csi::v1::NodeGetStorageHealthResponse* resp);
  // Returns the new capacity in bytes.
  absl::StatusOr<int64_t> Expand(const csi::v1::NodeExpandVolumeRequest& req);

  // Every volume of this driver (for the agent API); unreadable records are skipped and
  // reported in `errors`.
  std::vector<StagedVolume> Volumes(std::vector<std::string>* errors) const {
    return store_.List(errors);
  }

  // Per volume, the stages that other nodes' reservations refused and those that took a dead
  // node's over, since the agent started: every single-node volume staged here (at zero until
  // something is counted, so that a rate has a sample before its first event) and every volume
  // with a count. Reads the records (no I/O to the LUNs). node_stats.cc.
  std::vector<ReservationTally> ReservationTallies() const;

  // What serves `volume`'s data path now (for the agent API).
  transport::SessionDescription DescribeSession(const StagedVolume& volume) const {
    return deps_.transport.Describe(volume.session);
  }

  // Takes up first what the transport does in the background for every staged volume
  // (transport::Transport::Resume). Then replaces, one volume at a time and under its lock, each
  // session process of another build
  // than the transport's own (stagehand was upgraded) through a handover that leaves the mount,
  // the device and the filesystem in place, and saves the volume's new session record. A volume
  // whose replacement fails keeps its old process (logged). Stops between volumes once `stop`
  // is requested. session_upgrades.cc.
  struct UpgradeRound {
    int replaced = 0;
    int waiting = 0;  // Could not be replaced now (reconnecting, or busy): ask again later.
  };

  UpgradeRound UpgradeSessions(const std::stop_token& stop);

 private:
  // The session's problem (gone, stopped, reconnecting, another LUN, fewer paths), if any.
  std::optional<VolumeProblem> SessionProblem(const StagedVolume& volume) const;
  // The problems of the volume's mount at `path`: missing, a failed or erroring filesystem.
  std::vector<VolumeProblem> ProblemsAt(const StagedVolume& volume, const std::string& path) const;
  std::string RecordsDir() const;
  std::vector<std::string> ReservedDirs() const;
  // NodePublishVolume's checks of its paths (well-formed, not reserved, not in the staging
  // path), and of the record it publishes (staged there, alive, as block or mount alike, no
  // other flags at this target, one target for a single writer).
  absl::Status CheckPublishPaths(const csi::v1::NodePublishVolumeRequest& req) const;
  absl::Status CheckPublishable(const csi::v1::NodePublishVolumeRequest& req,
                                const StagedVolume& volume, const CapabilitySpec& cap,
                                bool readonly) const;

  NodeServiceDeps deps_;
  const NodeServiceOptions options_;
  VolumeStore store_;
  VolumeLocks locks_;
  const VolumeHealth health_;
  VolumeStager stager_;  // Uses deps_, options_ and store_.
};

}  // namespace stagehand::driver

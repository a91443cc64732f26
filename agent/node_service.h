#pragma once

// The CSI Node service of the built-in iSCSI driver: glue between the iSCSI transport, the
// mounter and the persisted volume records. Thread-safe: gRPC calls it from many threads; one
// operation per volume runs at a time (others get ABORTED).

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "agent/csi_validation.h"
#include "agent/volume_locks.h"
#include "agent/volume_store.h"
#include "iscsi/transport.h"
#include "mounter/block_probe.h"
#include "mounter/mounter.h"
#include "proto/csi.grpc.pb.h"

namespace stagehand::agent {

struct NodeServiceOptions {
  std::string node_id;
  int64_t max_volumes_per_node = 0;            // 0: unlimited.
  uint32_t replacement_timeout_seconds = 120;  // Unless the volume context says otherwise.
  std::string initiator_name;
  std::string state_dir;    // Holds volumes/ (records).
  std::string runtime_dir;  // Holds sessions/<hash>/ of session processes.
};

struct NodeServiceDeps {
  iscsi::Transport& transport;
  mounter::Mounter& mounter;
  mounter::BlockProbe& probe;
  // mkfs and fsck; default to mounter::Format / mounter::Check.
  std::function<absl::Status(const std::string&, std::string_view)> format;
  std::function<absl::Status(const std::string&, std::string_view)> check;
  // Grows a filesystem (device, mount path, fs type); defaults to mounter::Grow.
  std::function<absl::Status(const std::string&, const std::string&, std::string_view)> grow;
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
  // Returns the new capacity in bytes.
  absl::StatusOr<int64_t> Expand(const csi::v1::NodeExpandVolumeRequest& req);

 private:
  std::string RecordsDir() const;
  std::string SessionDir(const std::string& volume_id) const;
  std::vector<std::string> ReservedDirs() const;
  absl::Status CheckParentIsReal(const std::string& path, std::string_view field) const;
  // InvalidArgument when `target` lies inside, or contains, any volume's staging path or
  // another publish target (this volume's own repeat at `target` aside).
  absl::Status CheckNoOverlap(const std::string& volume_id, const std::string& target) const;
  // Undoes whatever a record says exists (mount, session) and removes the record.
  absl::Status TearDown(state::v1::VolumeRecord& record);
  absl::Status StageFresh(const csi::v1::NodeStageVolumeRequest& req,
                          state::v1::VolumeRecord record, const CapabilitySpec& cap,
                          const iscsi::TargetSpec& target);
  absl::Status MountStaged(state::v1::VolumeRecord& record, const std::string& device,
                           const CapabilitySpec& cap);
  // Persists, before mkfs, that this volume starts formatting the LUN `record` identifies, so
  // that a stage of the same volume can finish a format cut short (it leaves data without a
  // signature, which is otherwise never formatted). Kept across failed stages and restarts;
  // removed once a filesystem is there, on a block stage and on NodeUnstageVolume. Nothing is
  // recorded for a LUN without identity.
  absl::Status RecordFormatIntent(const state::v1::VolumeRecord& record,
                                  const std::string& fs_type);
  // Drops the record of `volume_id`'s unfinished format, if any.
  absl::Status ForgetFormatIntent(const std::string& volume_id);
  // True when this volume recorded a format of `fs_type` on the very LUN `record` now holds.
  absl::StatusOr<bool> InterruptedFormatIsOurs(const state::v1::VolumeRecord& record,
                                               const std::string& fs_type) const;
  // OK when the staged volume is usable: stage complete, session healthy, staging mount of its
  // device in place. FailedPrecondition saying what is wrong otherwise.
  absl::Status CheckStagingLive(const state::v1::VolumeRecord& record);
  bool StagingHealthy(const state::v1::VolumeRecord& record);
  // The recorded publish targets that are still mounted (or whose mount state cannot be read).
  std::vector<std::string> StillPublished(const state::v1::VolumeRecord& record) const;
  // Another volume's record that holds the LUN `record` is about to use: with `identity` null,
  // the same target and LUN through a common portal address; else (once the LUN was read) the
  // same LUN identity. Two volumes on one LUN would mount one filesystem twice and corrupt it.
  // Call with claims_mu_ held.
  // FailedPrecondition when a record cannot be read (it might be the one).
  absl::StatusOr<std::optional<state::v1::VolumeRecord>> OtherVolumeOnLun(
      const state::v1::VolumeRecord& record, const iscsi::LunIdentity* identity) const;
  // A stage refused its LUN with nothing of it attached: a first stage leaves no record; a
  // re-stage (its old attempt is torn down already) keeps its record, session cleared, with the
  // identity it staged before, so that a retry fails closed again instead of staging the LUN
  // now there.
  absl::Status ForgetRefusedStage(state::v1::VolumeRecord& record,
                                  const iscsi::LunIdentity& previous);
  // What the transport calls with the identity of the LUN it reached, before exposing it:
  // refuses another volume's LUN and, on a re-stage, a LUN other than the one staged before;
  // else claims the LUN by saving its identity in `record`.
  absl::Status VetIdentity(state::v1::VolumeRecord& record, const iscsi::LunIdentity& identity,
                           const iscsi::LunIdentity& previous, const iscsi::TargetSpec& target);

  NodeServiceDeps deps_;
  NodeServiceOptions options_;
  VolumeStore store_;
  VolumeStore format_intents_;  // <state>/format-intents: formats started and not finished.
  VolumeLocks locks_;
  // Held from the check that no other volume uses a LUN until the record claiming it is saved,
  // so that two volumes staged at once cannot both claim it.
  std::mutex claims_mu_;
};

}  // namespace stagehand::agent

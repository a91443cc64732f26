#pragma once

// The staging pipeline of the built-in driver, below the CSI adapter (node_service.h): claim
// the LUN, persist the record before each side effect, attach through the transport (which hands
// over the LUN's identity to vet before it exposes the LUN), probe, format only when provably
// blank (or to finish this volume's own interrupted format on the same LUN), check, mount at the
// staging path; and the teardown in reverse.
//
// Callers hold the volume's lock (VolumeLocks): one operation per volume. Stages of different
// volumes may run at once; their LUN claims are serialised here.

#include <string>

#include "base/mutex.h"
#include "driver/csi_validation.h"
#include "driver/node_options.h"
#include "driver/staged_volume.h"
#include "driver/takeover_watch.h"
#include "driver/volume_store.h"
#include "iscsi/lun_identity.h"
#include "iscsi/target_spec.h"
#include "proto/csi.pb.h"
#include "transport/transport.h"

namespace stagehand::driver {

class VolumeStager {
 public:
  // `deps` (with format and check set) and `store` must outlive the stager.
  VolumeStager(const NodeServiceDeps& deps, const NodeServiceOptions& options, VolumeStore& store);

  // Stages `req` from scratch. `previous` is empty, or (a re-stage after a teardown) the
  // identity staged before: the LUN found must then be that one. On failure what was made is
  // undone and the record is removed (or, re-staging, kept with its old identity).
  absl::Status Stage(const csi::v1::NodeStageVolumeRequest& req, const iscsi::LunIdentity& previous,
                     const CapabilitySpec& cap, const iscsi::TargetSpec& target);

  // Undoes whatever `volume` says exists (staging mount, session) and removes its record.
  // Refuses to unmount a staging path that holds another device's mount.
  absl::Status TearDown(StagedVolume& volume);

  // Drops the record of `volume_id`'s unfinished format, if any.
  absl::Status ForgetFormatIntent(const std::string& volume_id);

  // Where session processes of this driver keep their runtime files, and formats in progress
  // are recorded: reserved, never a staging or publish path.
  std::string SessionsDir() const;

  const std::string& FormatIntentsDir() const { return format_intents_.dir(); }

  // The writer of a multi-node single-writer volume, staged as a reader, is chosen at publish
  // (transport::Transport::SetWriter): `write` claims the LUN for this node's writes (refused
  // with Unavailable while another node holds it; a holder that stands still for the takeover
  // time is taken over, as a stage does), otherwise this node's claim is given up. Saves the
  // record.
  absl::Status SetWriter(StagedVolume& volume, bool write);

  // What the stages here met of other nodes' reservations since the agent started.
  std::vector<ReservationTally> ReservationTallies() const { return takeovers_.Tallies(); }

 private:
  std::string SessionDir(const std::string& volume_id) const;
  // The reservation fields of `attach`: this node's key, the takeover time `takeover` (0:
  // off) and the dead holder to take over, if the watch has one.
  void Reserve(const std::string& volume_id, uint32_t takeover,
               transport::AttachRequest& attach) const;
  transport::AttachRequest AttachRequestFor(const csi::v1::NodeStageVolumeRequest& req,
                                            const CapabilitySpec& cap,
                                            const iscsi::TargetSpec& target) const;
  // Under claims_mu_: refuses a stage past max_volumes_per_node or onto a LUN another volume's
  // record names (forgetting this attempt), else saves `volume` before any side effect.
  absl::Status ClaimAndPersist(StagedVolume& volume, const iscsi::LunIdentity& previous,
                               const iscsi::TargetSpec& target) ABSL_LOCKS_EXCLUDED(claims_mu_);
  absl::Status MountStaged(StagedVolume& volume, const std::string& device,
                           const CapabilitySpec& cap);
  // Persists, before mkfs, that this volume starts formatting the LUN `volume` identifies, so
  // that a stage of the same volume can finish a format cut short (it leaves data without a
  // signature, which is otherwise never formatted). Kept across failed stages and restarts;
  // removed once a filesystem is there, on a block stage and on NodeUnstageVolume. Nothing is
  // recorded for a LUN without identity.
  absl::Status RecordFormatIntent(const StagedVolume& volume, const std::string& fs_type);
  // True when this volume recorded a format of `fs_type` on the very LUN `volume` now holds.
  absl::StatusOr<bool> InterruptedFormatIsOurs(const StagedVolume& volume,
                                               const std::string& fs_type) const;
  // FindVolumeOnLun over every record; FailedPrecondition when a record cannot be read (it
  // might be the one).
  absl::StatusOr<std::optional<StagedVolume>> OtherVolumeOnLun(
      const StagedVolume& volume, const iscsi::LunIdentity* identity) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(claims_mu_);
  // A stage refused its LUN with nothing of it attached: a first stage leaves no record; a
  // re-stage (its old attempt is torn down already) keeps its record, session cleared, with the
  // identity it staged before, so that a retry fails closed again instead of staging the LUN
  // now there.
  absl::Status ForgetRefusedStage(StagedVolume& volume, const iscsi::LunIdentity& previous);
  // What the transport calls with the identity of the LUN it reached, before exposing it:
  // refuses another volume's LUN and, on a re-stage, a LUN other than the one staged before;
  // else claims the LUN by saving its identity, and the session as it stands (`so_far`), in
  // `volume`'s record.
  absl::Status VetIdentity(StagedVolume& volume, const iscsi::LunIdentity& identity,
                           const state::v1::SessionRecord& so_far,
                           const iscsi::LunIdentity& previous, const iscsi::TargetSpec& target);

  const NodeServiceDeps& deps_;
  const NodeServiceOptions& options_;
  VolumeStore& store_;
  FormatIntentStore format_intents_;  // <state>/format-intents: formats started, not finished.
  // Held from the check that no other volume uses a LUN until the record claiming it is saved,
  // so that two volumes staged at once cannot both claim it.
  Mutex claims_mu_;
  // Other nodes' holders of the LUNs of volumes this node waits for.
  TakeoverWatch takeovers_;
};

}  // namespace stagehand::driver

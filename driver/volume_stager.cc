#include "driver/volume_stager.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <spdlog/spdlog.h>

#include "base/clock.h"
#include "base/file_io.h"
#include "base/log.h"
#include "base/paths.h"
#include "base/sha256.h"
#include "driver/csi_validation.h"
#include "driver/lun_claims.h"
#include "iscsi/persistent_reservation.h"
#include "iscsi/reservation_claim.h"
#include "iscsi/target_spec.h"
#include "mounter/format_decision.h"

namespace stagehand::driver {
namespace {

constexpr LogComponent kComponent = LogComponent::kCsi;

}  // namespace

VolumeStager::VolumeStager(const NodeServiceDeps& deps, const NodeServiceOptions& options,
                           VolumeStore& store)
    : deps_(deps),
      options_(options),
      store_(store),
      format_intents_(JoinPath(options.state_dir, "format-intents")),
      takeovers_(RealClock::Get()) {}

std::string VolumeStager::SessionsDir() const {
  return JoinPath(options_.runtime_dir, "sessions");
}

std::string VolumeStager::SessionDir(const std::string& volume_id) const {
  return JoinPath(SessionsDir(), Sha256Hex(volume_id).substr(0, 32));
}

namespace {

// What the record says of the stage `req` asks for (phase kStaging); the identity and the
// session come later.
void DescribeRequest(const csi::v1::NodeStageVolumeRequest& req, const CapabilitySpec& cap,
                     const iscsi::TargetSpec& target, StagedVolume& volume) {
  volume.volume_id = req.volume_id();
  volume.staging_path = req.staging_target_path();
  volume.capability = cap;
  volume.portals = target.portals;
  volume.iqn = target.iqn;
  volume.lun = target.lun;
  volume.volume_context.insert(req.volume_context().begin(), req.volume_context().end());
  volume.phase = StagedVolume::Phase::kStaging;
}

}  // namespace

transport::AttachRequest VolumeStager::AttachRequestFor(const csi::v1::NodeStageVolumeRequest& req,
                                                        const CapabilitySpec& cap,
                                                        const iscsi::TargetSpec& target) const {
  transport::AttachRequest attach;
  attach.target = target;
  // Checked before the stage began (NodeService::Stage).
  attach.transport =
      deps_.transport.Chosen({req.volume_context().begin(), req.volume_context().end()})
          .value_or("");
  attach.initiator_name = options_.initiator_name;
  attach.runtime_dir = SessionDir(req.volume_id());
  attach.volume_id = req.volume_id();
  attach.read_only = cap.read_only_mode;
  attach.replacement_timeout_seconds =
      target.replacement_timeout_seconds.value_or(options_.replacement_timeout_seconds);
  // One writer across nodes: the LUN is reserved under this node's key before its first
  // write (fsck, mkfs, mount). A multi-node single-writer volume is staged as a reader; its
  // writer claims at publish (SetWriter).
  if (IsSingleNode(cap.access_mode)) {
    Reserve(req.volume_id(),
            target.takeover_after_seconds.value_or(options_.takeover_after_seconds), attach);
  }
  return attach;
}

void VolumeStager::Reserve(const std::string& volume_id, uint32_t takeover,
                           transport::AttachRequest& attach) const {
  // Renewed every third of the takeover time; a holder whose key stood still for the takeover
  // time is taken over.
  attach.reservation_key = iscsi::NodeKey(options_.node_id, 0);
  attach.reservation_optional = takeover == 0;
  attach.reservation_renew_seconds = std::max(1u, (takeover == 0 ? 30 : takeover) / 3);
  if (takeover != 0) {
    attach.takeover_key = takeovers_.KeyToTakeOver(volume_id, std::chrono::seconds(takeover),
                                                   &attach.takeover_node_keys);
  }
}

absl::Status VolumeStager::SetWriter(StagedVolume& volume, bool write) {
  transport::AttachRequest request;
  request.volume_id = volume.volume_id;
  request.runtime_dir = SessionDir(volume.volume_id);
  request.initiator_name = options_.initiator_name;
  if (write) {
    uint32_t takeover = options_.takeover_after_seconds;
    if (auto it = volume.volume_context.find(iscsi::kTakeoverAfterKey);
        it != volume.volume_context.end()) {
      SH_ASSIGN_OR_RETURN(takeover,
                          iscsi::ParseTakeoverAfter(it->second, "volume context 'takeoverAfter'"));
    }
    Reserve(volume.volume_id, takeover, request);
  }
  absl::StatusOr<transport::WriterChange> changed =
      deps_.transport.SetWriter(volume.session, request);
  if (!changed.ok()) {
    if (const uint64_t holder = iscsi::HolderKeyOf(changed.status()); holder != 0) {
      takeovers_.Refused(volume.volume_id, holder, iscsi::HolderNodeKeysOf(changed.status()));
      return absl::UnavailableError(absl::StrCat(
          "volume '", volume.volume_id,
          "' is written on another node: the LUN's reservation is held under key ",
          iscsi::FormatKey(holder),
          " (stagehandctl iscsi reservation names its node). A multi-node single-writer volume "
          "has one writer: publish it read-only here, or unpublish it there first; a holder "
          "whose key has not moved for the takeover time (a dead node) is taken over"));
    }
    return changed.status();
  }
  if (write) {
    takeovers_.Forget(volume.volume_id);
  }
  if (changed->took_over_from != 0) {
    takeovers_.TookOver(volume.volume_id);
    Log(kComponent)
        .warn(
            "publish volume='{}': took the LUN over from key {}, unchanged for the takeover "
            "time (its node is taken for dead and is fenced)",
            volume.volume_id, iscsi::FormatKey(changed->took_over_from));
  }
  Log(kComponent)
      .info("volume '{}': {} this node's writes", volume.volume_id,
            write ? "the LUN is reserved for" : "the LUN's reservation is given up: no more of");
  volume.session = std::move(changed->session);
  return WithContext(store_.Save(volume), "persist volume record");
}

absl::Status VolumeStager::ClaimAndPersist(StagedVolume& volume, const iscsi::LunIdentity& previous,
                                           const iscsi::TargetSpec& target) {
  MutexLock claim(claims_mu_);
  // Counted under the lock that orders the saves of new records, so that concurrent stages
  // cannot all pass the limit.
  if (options_.max_volumes_per_node > 0 && previous.Empty()) {  // A re-stage was counted.
    SH_ASSIGN_OR_RETURN(auto mine, store_.Load(volume.volume_id));
    if (!mine.has_value() &&
        static_cast<int64_t>(store_.List().size()) >= options_.max_volumes_per_node) {
      return absl::ResourceExhaustedError(absl::StrCat("this node already has ",
                                                       options_.max_volumes_per_node,
                                                       " volumes staged (the maximum)"));
    }
  }
  SH_ASSIGN_OR_RETURN(auto other, OtherVolumeOnLun(volume, /*identity=*/nullptr));
  if (other) {
    SH_RETURN_IF_ERROR(ForgetRefusedStage(volume, previous));
    return absl::FailedPreconditionError(absl::StrCat(
        "LUN ", target.lun, " of ", target.iqn, " is already used by volume '", other->volume_id,
        "' (", DescribeStage(*other),
        "); one LUN cannot back two volumes: unstage the other volume first, or fix the "
        "volume_context of this one"));
  }
  // Persist before any side effect (safety rule 3).
  return WithContext(store_.Save(volume), "persist volume record");
}

absl::Status VolumeStager::Stage(const csi::v1::NodeStageVolumeRequest& req,
                                 const iscsi::LunIdentity& previous, const CapabilitySpec& cap,
                                 const iscsi::TargetSpec& target) {
  StagedVolume volume;
  volume.identity = previous;
  DescribeRequest(req, cap, target, volume);
  transport::AttachRequest attach = AttachRequestFor(req, cap, target);
  // The same LUN can hide behind another name or address of its portal, or another portal: the
  // transport hands over the identity it read before it exposes the LUN, and the record claims
  // it (saved under claims_mu_, so that two volumes staged at once cannot both have it).
  bool vetoed = false;  // The attach refused the LUN and undid what it made.
  attach.vet_identity = [&](const transport::Identity& identity,
                            const state::v1::SessionRecord& so_far) -> absl::Status {
    absl::Status s =
        VetIdentity(volume, std::get<iscsi::LunIdentity>(identity), so_far, previous, target);
    vetoed = !s.ok();
    return s;
  };
  deps_.transport.Prepare(attach, &volume.session);
  SH_RETURN_IF_ERROR(ClaimAndPersist(volume, previous, target));
  absl::Cleanup undo = [&] {
    // A refused LUN: the attach undid what it made, and what is left on that LUN (a kernel
    // session's disk) is not this volume's; a detach of this record, which does not know its
    // device, could take it.
    // A re-stage keeps the identity it staged before (ForgetRefusedStage after the teardown):
    // the next retry must still find that very LUN, not whatever the number names now.
    absl::Status s = vetoed ? ForgetRefusedStage(volume, previous) : TearDown(volume);
    if (s.ok() && !vetoed && !previous.Empty()) {
      s = ForgetRefusedStage(volume, previous);
    }
    if (!s.ok()) {
      Log(kComponent)
          .error("stage volume='{}': cleanup after failure failed: {}", req.volume_id(), s);
    }
  };

  const auto started = std::chrono::steady_clock::now();
  auto elapsed_ms = [&started] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
        .count();
  };
  absl::StatusOr<transport::Attachment> attached = deps_.transport.Attach(attach);
  if (!attached.ok()) {
    // Another node holds the LUN: how long its key stays unchanged tells a dead holder.
    if (const uint64_t holder = iscsi::HolderKeyOf(attached.status()); holder != 0) {
      takeovers_.Refused(req.volume_id(), holder, iscsi::HolderNodeKeysOf(attached.status()));
    }
    return attached.status();
  }
  takeovers_.Forget(req.volume_id());
  if (attached->took_over_from != 0) {
    takeovers_.TookOver(req.volume_id());
    Log(kComponent)
        .warn(
            "stage volume='{}': took the LUN over from key {}, unchanged for the takeover "
            "time (its node is taken for dead and is fenced)",
            req.volume_id(), iscsi::FormatKey(attached->took_over_from));
  }
  transport::Attachment a = std::move(*attached);
  Log(kComponent)
      .debug("stage volume='{}' attached device={} after {:.1f} ms", req.volume_id(), a.device,
             elapsed_ms());
  volume.session = a.session;
  volume.identity = std::get<iscsi::LunIdentity>(a.identity);
  volume.capacity_bytes = a.capacity.Bytes();
  SH_RETURN_IF_ERROR(WithContext(store_.Save(volume), "persist volume record"));
  if (cap.block) {
    // A block consumer owns the LUN's bytes: no format of ours is to be finished on it.
    SH_RETURN_IF_ERROR(ForgetFormatIntent(volume.volume_id));
  } else {
    SH_RETURN_IF_ERROR(MountStaged(volume, a.device, cap));
    Log(kComponent)
        .debug("stage volume='{}' mounted after {:.1f} ms (formatted: {})", req.volume_id(),
               elapsed_ms(), volume.formatted_by_us);
  }
  volume.phase = StagedVolume::Phase::kStaged;
  SH_RETURN_IF_ERROR(WithContext(store_.Save(volume), "persist volume record"));
  std::move(undo).Cancel();
  return absl::OkStatus();
}

absl::Status VolumeStager::ForgetRefusedStage(StagedVolume& volume,
                                              const iscsi::LunIdentity& previous) {
  if (previous.Empty()) {
    return store_.Remove(volume.volume_id);
  }
  volume.identity = previous;
  volume.session.Clear();
  return WithContext(store_.Save(volume), "persist volume record");
}

absl::Status VolumeStager::VetIdentity(StagedVolume& volume, const iscsi::LunIdentity& identity,
                                       const state::v1::SessionRecord& so_far,
                                       const iscsi::LunIdentity& previous,
                                       const iscsi::TargetSpec& target) {
  MutexLock claim(claims_mu_);
  SH_ASSIGN_OR_RETURN(auto other, OtherVolumeOnLun(volume, &identity));
  if (other) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the LUN at ", target.iqn, " LUN ", target.lun, " (", iscsi::DescribeIdentity(identity),
        ") is already used by volume '", other->volume_id, "' (", DescribeStage(*other),
        "); one LUN cannot back two volumes. If these are different LUNs, give them unique "
        "identities (WWN, serial) on the target"));
  }
  if (!previous.Empty()) {
    // A re-stage must find the LUN it staged before: a reused LUN number must not hand this
    // volume another application's disk.
    SH_RETURN_IF_ERROR(iscsi::CheckSameLun(previous, identity));
  }
  volume.identity = identity;
  // A crash before the attach returns leaves this session record: its teardown then undoes what
  // the attach made so far (the kernel transport deletes only disks that still report the
  // identity the transport put in it).
  volume.session = so_far;
  return WithContext(store_.Save(volume), "persist volume record");
}

absl::StatusOr<std::optional<StagedVolume>> VolumeStager::OtherVolumeOnLun(
    const StagedVolume& volume, const iscsi::LunIdentity* identity) const {
  std::vector<std::string> errors;
  const std::vector<StagedVolume> volumes = store_.List(&errors);
  if (!errors.empty()) {
    // A record that cannot be read may be the one holding this LUN: fail closed.
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot tell whether another volume uses this LUN: ", absl::StrJoin(errors, "; "),
        "; repair or remove the record"));
  }
  return FindVolumeOnLun(volumes, volume, identity);
}

absl::Status VolumeStager::RecordFormatIntent(const StagedVolume& volume,
                                              const std::string& fs_type) {
  if (volume.identity.Empty()) {
    return absl::OkStatus();  // Without an identity, a later stage could not prove the same LUN.
  }
  return WithContext(
      format_intents_.Save(FormatIntent{
          .volume_id = volume.volume_id, .identity = volume.identity, .fs_type = fs_type}),
      "record the format about to start");
}

absl::Status VolumeStager::ForgetFormatIntent(const std::string& volume_id) {
  return WithContext(format_intents_.Remove(volume_id),
                     "remove the record of a format in progress");
}

absl::StatusOr<bool> VolumeStager::InterruptedFormatIsOurs(const StagedVolume& volume,
                                                           const std::string& fs_type) const {
  SH_ASSIGN_OR_RETURN(auto intent, format_intents_.Load(volume.volume_id));
  if (!intent.has_value() || intent->fs_type != fs_type) {
    return false;
  }
  return !intent->identity.Empty() && !volume.identity.Empty() &&
         iscsi::CheckSameLun(intent->identity, volume.identity).ok();
}

absl::Status VolumeStager::MountStaged(StagedVolume& volume, const std::string& device,
                                       const CapabilitySpec& cap) {
  auto step = std::chrono::steady_clock::now();
  auto step_ms = [&step] {
    const auto now = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - step).count();
    step = now;
    return ms;
  };
  SH_ASSIGN_OR_RETURN(mounter::ProbeResult probe, deps_.probe.Probe(device));
  Log(kComponent)
      .debug("stage volume='{}': probe of {} took {:.1f} ms", volume.volume_id, device, step_ms());
  absl::StatusOr<mounter::FormatAction> decision = mounter::DecideFormat(probe, cap.fs_type);
  if (!decision.ok() && probe.kind == mounter::ProbeResult::Kind::kNotZeroed) {
    // Data without any signature is what an mkfs cut short (kill -9, a crash) leaves: only the
    // stage that started that format, on the same LUN, may finish it.
    SH_ASSIGN_OR_RETURN(bool ours, InterruptedFormatIsOurs(volume, cap.fs_type));
    if (ours) {
      Log(kComponent)
          .warn(
              "stage volume='{}': finishing the {} format an earlier stage of this volume "
              "started on this LUN",
              volume.volume_id, cap.fs_type);
      decision = mounter::FormatAction::kFormat;
    }
  }
  SH_ASSIGN_OR_RETURN(mounter::FormatAction action, std::move(decision));
  if (action == mounter::FormatAction::kFormat) {
    if (cap.read_only_mode) {
      return absl::FailedPreconditionError(
          "the LUN is blank and the access mode is read-only; stage it read-write once to format "
          "it");
    }
    SH_RETURN_IF_ERROR(RecordFormatIntent(volume, cap.fs_type));
    SH_RETURN_IF_ERROR(deps_.format(device, cap.fs_type));
    volume.formatted_by_us = true;
  } else if (!cap.read_only_mode) {
    SH_RETURN_IF_ERROR(deps_.check(device, cap.fs_type));
  }
  // The format is complete (or was never ours to finish: the LUN holds a filesystem now).
  SH_RETURN_IF_ERROR(ForgetFormatIntent(volume.volume_id));
  Log(kComponent)
      .debug("stage volume='{}': {} took {:.1f} ms", volume.volume_id,
             volume.formatted_by_us ? "format" : "check", step_ms());
  SH_RETURN_IF_ERROR(MakeDirs(volume.staging_path, 0750));
  mounter::MountRequest m;
  m.source = device;
  m.target = volume.staging_path;
  m.fstype = cap.fs_type;
  m.options = cap.mount_flags;
  if (cap.read_only_mode) {
    // A read-only mount still replays a dirty journal (it writes the LUN) unless told not to:
    // a reader must not change what other readers, or a later writer, see.
    m.options.emplace_back("ro");
    m.options.emplace_back(cap.fs_type == "xfs" ? "norecovery" : "noload");
  }
  absl::Status mounted = deps_.mounter.Mount(m);
  if (!mounted.ok() && cap.fs_type == "xfs" &&
      absl::StrContains(mounted.message(), "duplicate UUID")) {
    // A clone (a copied LUN, a restored snapshot) beside its source: XFS refuses a second
    // filesystem whose UUID is already mounted. Mounted with nouuid, as other drivers do; the
    // UUID on disk is never changed (that would write the LUN behind the user's back).
    Log(kComponent)
        .warn(
            "stage volume='{}': another mounted XFS has the UUID of the one on {} (a clone?): "
            "mounting it with nouuid",
            volume.volume_id, device);
    m.options.emplace_back("nouuid");
    mounted = deps_.mounter.Mount(m);
    volume.xfs_nouuid = mounted.ok();
  }
  return mounted;
}

absl::Status VolumeStager::TearDown(StagedVolume& volume) {
  volume.phase = StagedVolume::Phase::kUnstaging;
  SH_RETURN_IF_ERROR(store_.Save(volume));
  if (!volume.capability.block && !volume.staging_path.empty()) {
    auto m = deps_.mounter.Find(volume.staging_path);
    SH_RETURN_IF_ERROR(m.status());
    if (m->has_value()) {
      if (!volume.Device().empty() && (*m)->source != volume.Device()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "staging path '", volume.staging_path, "' holds a mount of '", (*m)->source,
            "', not of this volume's device '", volume.Device(), "'; refusing to unmount it"));
      }
      if (auto unmounted = deps_.mounter.Unmount(volume.staging_path); !unmounted.ok()) {
        // Refused (busy) or failed before anything was undone: the volume is still staged and
        // served, and health and stats keep answering for it.
        volume.phase = StagedVolume::Phase::kStaged;
        (void)store_.Save(volume);
        return unmounted;
      }
    }
  }
  SH_RETURN_IF_ERROR(deps_.transport.Detach(volume.session));
  return store_.Remove(volume.volume_id);
}

}  // namespace stagehand::driver

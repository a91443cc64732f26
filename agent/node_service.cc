#include "agent/node_service.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <spdlog/spdlog.h>

#include "base/c_handle.h"
#include "base/file_io.h"
#include "base/log.h"
#include "base/paths.h"
#include "base/sha256.h"
#include "iscsi/session_conversions.h"
#include "mounter/filesystem.h"
#include "mounter/format_decision.h"
#include "mounter/volume_stats.h"
#include "proto/grpc_status.h"

namespace stagehand::agent {
namespace {

// This component's logger (base/log.h).
spdlog::logger& Log() {
  static spdlog::logger& log = ComponentLog("csi");
  return log;
}

using csi::v1::NodeServiceCapability;
using state::v1::PublishRecord;
using state::v1::VolumeRecord;

std::map<std::string, std::string> ToMap(const google::protobuf::Map<std::string, std::string>& m) {
  return {m.begin(), m.end()};
}

bool SameFlags(const google::protobuf::RepeatedPtrField<std::string>& a,
               const std::vector<std::string>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

using Dir = CHandle<DIR, &closedir>;

bool PathExists(const std::string& path) {
  struct stat st {};

  return lstat(path.c_str(), &st) == 0;
}

// Removes what a publish made at its (unmounted) target: an empty directory, or the empty
// regular file of a block publish. Anything else there (files written into the directory after
// the unmount, a file with data) is not ours to delete and is left, so that a teardown never
// wedges on it either.
absl::Status RemoveTarget(const std::string& path) {
  struct stat st {};

  if (lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus()
                           : ErrnoStatus(errno, absl::StrCat("stat '", path, "'"));
  }
  if (S_ISDIR(st.st_mode)) {
    if (rmdir(path.c_str()) != 0 && errno != ENOENT) {
      if (errno == ENOTEMPTY || errno == EEXIST) {
        Log().warn("unpublish: target directory '{}' is not empty; leaving it", path);
        return absl::OkStatus();
      }
      return ErrnoStatus(errno, absl::StrCat("remove target directory '", path, "'"));
    }
    return absl::OkStatus();
  }
  if (!S_ISREG(st.st_mode) || st.st_size != 0) {
    Log().warn("unpublish: target '{}' is not the empty file stagehand made; leaving it", path);
    return absl::OkStatus();
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("remove target file '", path, "'"));
  }
  return absl::OkStatus();
}

// FailedPrecondition when publishing at `path` would hide something: a directory that is not
// empty, or a file with data (block); also a target of the wrong type. Absent is fine.
absl::Status CheckTargetEmpty(const std::string& path, bool block) {
  struct stat st {};

  if (lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus()
                           : ErrnoStatus(errno, absl::StrCat("stat target_path '", path, "'"));
  }
  if (block) {
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("target_path '", path,
                       "' exists and is not a regular file; a block volume is bound "
                       "onto a file: give an absent path or an empty file"));
    }
    if (st.st_size != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("target_path '", path,
                       "' is a file with data; publishing would hide it: give an "
                       "absent path or an empty file"));
    }
    return absl::OkStatus();
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("target_path '", path, "' exists and is not a directory"));
  }
  Dir dir(opendir(path.c_str()));
  if (!dir) {
    return ErrnoStatus(errno, absl::StrCat("list target_path '", path, "'"));
  }
  while (const dirent* entry = readdir(dir.get())) {
    if (std::string_view(entry->d_name) != "." && std::string_view(entry->d_name) != "..") {
      return absl::FailedPreconditionError(absl::StrCat(
          "target_path '", path, "' is a directory that is not empty (it holds '", entry->d_name,
          "'); publishing would hide its contents: give an empty or absent path"));
    }
  }
  return absl::OkStatus();
}

absl::Status LogResult(std::string_view rpc, const std::string& volume_id, absl::Status s) {
  if (s.ok()) {
    Log().info("{} volume='{}' ok", rpc, volume_id);
  } else if (s.code() == absl::StatusCode::kInvalidArgument ||
             s.code() == absl::StatusCode::kAborted || s.code() == absl::StatusCode::kNotFound) {
    Log().debug("{} volume='{}' rejected: {}", rpc, volume_id, s);
  } else {
    Log().warn("{} volume='{}' failed: {}", rpc, volume_id, s);
  }
  return s;
}

}  // namespace

NodeService::NodeService(NodeServiceDeps deps, NodeServiceOptions options)
    : deps_(std::move(deps)),
      options_(std::move(options)),
      store_(RecordsDir()),
      format_intents_(JoinPath(options_.state_dir, "format-intents")) {
  if (!deps_.format) {
    deps_.format = [](const std::string& d, std::string_view fs) { return mounter::Format(d, fs); };
  }
  if (!deps_.grow) {
    deps_.grow = [](const std::string& d, const std::string& m, std::string_view fs) {
      return mounter::Grow(d, m, fs);
    };
  }
  if (!deps_.check) {
    deps_.check = [](const std::string& d, std::string_view fs) { return mounter::Check(d, fs); };
  }
}

namespace {

// "staged at '/p'", "half staged at '/p'" (a stage cut short), "being unstaged from '/p'".
std::string DescribeRecord(const VolumeRecord& r) {
  switch (r.phase()) {
    case VolumeRecord::STAGED:
      return absl::StrCat("staged at '", r.staging_path(), "'");
    case VolumeRecord::UNSTAGING:
      return absl::StrCat("being unstaged from '", r.staging_path(), "'");
    default:
      return absl::StrCat("half staged at '", r.staging_path(), "'");
  }
}

}  // namespace

std::string NodeService::RecordsDir() const {
  return JoinPath(options_.state_dir, "volumes");
}

std::string NodeService::SessionDir(const std::string& volume_id) const {
  return JoinPath(JoinPath(options_.runtime_dir, "sessions"), Sha256Hex(volume_id).substr(0, 32));
}

std::vector<std::string> NodeService::ReservedDirs() const {
  return {RecordsDir(), format_intents_.dir(), JoinPath(options_.runtime_dir, "sessions")};
}

absl::Status NodeService::CheckParentIsReal(const std::string& path, std::string_view field) const {
  // The path must be what it says: no symlink in its parent may redirect the mount elsewhere.
  const std::string parent = ParentDir(path);
  std::array<char, PATH_MAX> resolved{};
  if (realpath(parent.c_str(), resolved.data()) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(field), " '", path,
                                                   "': parent directory '", parent,
                                                   "' does not exist; create it first"));
  }
  if (parent != resolved.data()) {
    return absl::InvalidArgumentError(absl::StrCat(
        ToAbsl(field), " '", path, "' goes through a symbolic link (its parent resolves to '",
        resolved.data(), "'); give the real path"));
  }

  struct stat st {};

  if (lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToAbsl(field), " '", path, "' is a symbolic link; give the real path"));
  }
  return absl::OkStatus();
}

absl::Status NodeService::CheckNoOverlap(const std::string& volume_id,
                                         const std::string& target) const {
  auto overlaps = [&target](const std::string& path) {
    return !path.empty() && (IsPathWithin(target, path) || IsPathWithin(path, target));
  };
  for (const VolumeRecord& other : store_.List()) {
    // A mount inside a staging path makes that volume's unstage fail (EBUSY); one over it or
    // over a publish would hide it.
    if (overlaps(other.staging_path())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "target_path '", target, "' overlaps the staging path '", other.staging_path(),
          "' of volume '", other.volume_id(), "'; give a path outside it"));
    }
    for (const auto& p : other.publishes()) {
      if (other.volume_id() == volume_id && p.target_path() == target) {
        continue;  // This very publish (a repeat).
      }
      if (overlaps(p.target_path())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "target_path '", target, "' overlaps '", p.target_path(), "', where volume '",
            other.volume_id(), "' is published; give a path outside it"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status NodeService::CheckStagingLive(const VolumeRecord& record) {
  if (record.phase() != VolumeRecord::STAGED) {
    return absl::FailedPreconditionError("its stage did not complete");
  }
  const iscsi::SessionHealth health = deps_.transport.Health(record.session());
  if (!health.healthy) {
    return absl::FailedPreconditionError(health.message);
  }
  if (record.block()) {
    return absl::OkStatus();
  }
  SH_ASSIGN_OR_RETURN(auto m, deps_.mounter.Find(record.staging_path()));
  if (!m.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("nothing is mounted at '", record.staging_path(),
                     "' (the node rebooted or the mount was removed)"));
  }
  if (m->source != iscsi::DeviceOf(record.session())) {
    return absl::FailedPreconditionError(absl::StrCat("'", record.staging_path(),
                                                      "' holds a mount of '", m->source,
                                                      "', not of this volume's device"));
  }
  return absl::OkStatus();
}

std::vector<std::string> NodeService::StillPublished(const VolumeRecord& record) const {
  std::vector<std::string> still;
  for (const auto& p : record.publishes()) {
    auto m = deps_.mounter.Find(p.target_path());
    if (!m.ok() || m->has_value()) {  // Unreadable mount state counts as mounted.
      still.push_back(p.target_path());
    }
  }
  return still;
}

bool NodeService::StagingHealthy(const VolumeRecord& record) {
  return CheckStagingLive(record).ok();
}

absl::Status NodeService::TearDown(VolumeRecord& record) {
  record.set_phase(VolumeRecord::UNSTAGING);
  SH_RETURN_IF_ERROR(store_.Save(record));
  if (!record.block() && !record.staging_path().empty()) {
    auto m = deps_.mounter.Find(record.staging_path());
    SH_RETURN_IF_ERROR(m.status());
    if (m->has_value()) {
      if (!iscsi::DeviceOf(record.session()).empty() &&
          (*m)->source != iscsi::DeviceOf(record.session())) {
        return absl::FailedPreconditionError(
            absl::StrCat("staging path '", record.staging_path(), "' holds a mount of '",
                         (*m)->source, "', not of this volume's device '",
                         iscsi::DeviceOf(record.session()), "'; refusing to unmount it"));
      }
      SH_RETURN_IF_ERROR(deps_.mounter.Unmount(record.staging_path()));
    }
  }
  SH_RETURN_IF_ERROR(deps_.transport.Detach(record.session()));
  return store_.Remove(record.volume_id());
}

// ----- NodeStageVolume -----

absl::Status NodeService::Stage(const csi::v1::NodeStageVolumeRequest& req) {
  if (req.volume_id().empty()) {
    return absl::InvalidArgumentError("volume_id is required");
  }
  SH_RETURN_IF_ERROR(ValidatePathField(req.staging_target_path(), "staging_target_path"));
  SH_RETURN_IF_ERROR(
      CheckNotReserved(req.staging_target_path(), "staging_target_path", ReservedDirs()));
  if (!req.has_volume_capability()) {
    return absl::InvalidArgumentError("volume_capability is required");
  }
  SH_ASSIGN_OR_RETURN(CapabilitySpec cap, ParseCapability(req.volume_capability()));
  auto target = iscsi::ParseTargetSpec(ToMap(req.volume_context()), ToMap(req.secrets()));
  if (!target.ok()) {
    return target.status();
  }
  SH_RETURN_IF_ERROR(CheckParentIsReal(req.staging_target_path(), "staging_target_path"));

  VolumeLocks::Guard guard(locks_, req.volume_id());
  if (!guard.held()) {
    return VolumeLocks::BusyError(req.volume_id());
  }
  SH_ASSIGN_OR_RETURN(auto existing, store_.Load(req.volume_id()));
  if (existing.has_value()) {
    VolumeRecord& rec = *existing;
    if (rec.staging_path() != req.staging_target_path() && rec.phase() == VolumeRecord::STAGED) {
      return absl::FailedPreconditionError(
          absl::StrCat("volume '", req.volume_id(), "' is already staged at '", rec.staging_path(),
                       "'; unstage it there first"));
    }
    const bool same =
        rec.block() == cap.block && rec.fs_type() == cap.fs_type &&
        SameFlags(rec.mount_flags(), cap.mount_flags) &&
        ToMap(rec.volume_context()) == ToMap(req.volume_context()) &&
        rec.access_mode() == csi::v1::VolumeCapability::AccessMode::Mode_Name(cap.access_mode);
    if (rec.phase() == VolumeRecord::STAGED && !same) {
      return absl::AlreadyExistsError(
          absl::StrCat("volume '", req.volume_id(), "' is already staged at '", rec.staging_path(),
                       "' with a different capability or volume_context"));
    }
    if (same && StagingHealthy(rec)) {
      return absl::OkStatus();  // Idempotent repeat.
    }
    // Never tear a staging down under its publishes: the bind mounts would stay on a dead
    // device, or a second session and loop device would mount the same filesystem twice (the
    // kubelet repeats NodeStageVolume, e.g. for every volume after its own restart, also while
    // a session reconnects after a target blip).
    if (std::vector<std::string> still = StillPublished(rec); !still.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "volume '", req.volume_id(), "' is published at ", absl::StrJoin(still, ", "),
          " but its staging is not usable (", CheckStagingLive(rec).message(),
          "); stagehand does not rebuild a staging under live publishes: unpublish them, then "
          "stage again"));
    }
    // Half-done (crash mid-stage), or staged but broken (session died, host rebooted) with no
    // publish left: undo what is left and stage again. The identity recorded last time must
    // still match.
    iscsi::LunIdentity previous = iscsi::FromProto(rec.identity());
    SH_RETURN_IF_ERROR(WithContext(TearDown(rec), "clean up the previous stage attempt"));
    VolumeRecord fresh;
    *fresh.mutable_identity() = rec.identity();
    (void)previous;
    return StageFresh(req, std::move(fresh), cap, *target);
  }
  return StageFresh(req, VolumeRecord(), cap, *target);
}

absl::Status NodeService::StageFresh(const csi::v1::NodeStageVolumeRequest& req,
                                     VolumeRecord record, const CapabilitySpec& cap,
                                     const iscsi::TargetSpec& target) {
  const iscsi::LunIdentity previous = iscsi::FromProto(record.identity());
  record.set_volume_id(req.volume_id());
  record.set_staging_path(req.staging_target_path());
  record.set_block(cap.block);
  record.set_fs_type(cap.fs_type);
  record.set_access_mode(csi::v1::VolumeCapability::AccessMode::Mode_Name(cap.access_mode));
  record.clear_mount_flags();
  for (const auto& f : cap.mount_flags) {
    record.add_mount_flags(f);
  }
  record.clear_portals();
  for (const auto& p : target.portals) {
    iscsi::ToProto(p, record.add_portals());
  }
  record.set_iqn(target.iqn);
  record.set_lun(target.lun);
  record.mutable_volume_context()->insert(req.volume_context().begin(), req.volume_context().end());
  record.set_phase(VolumeRecord::STAGING);
  iscsi::AttachRequest attach;
  attach.target = target;
  attach.initiator_name = options_.initiator_name;
  attach.runtime_dir = SessionDir(req.volume_id());
  attach.volume_id = req.volume_id();
  attach.read_only = cap.read_only_mode;
  attach.replacement_timeout_seconds =
      target.replacement_timeout_seconds.value_or(options_.replacement_timeout_seconds);
  // The same LUN can hide behind another name or address of its portal, or another portal: the
  // transport hands over the identity it read before it exposes the LUN, and the record claims
  // it (saved under claims_mu_, so that two volumes staged at once cannot both have it).
  bool vetoed = false;  // The attach refused the LUN and undid what it made.
  attach.vet_identity = [&](const iscsi::LunIdentity& identity) -> absl::Status {
    absl::Status s = VetIdentity(record, identity, previous, target);
    vetoed = !s.ok();
    return s;
  };
  deps_.transport.Prepare(attach, record.mutable_session());
  {
    std::lock_guard claim(claims_mu_);
    // Counted under the lock that orders the saves of new records, so that concurrent stages
    // cannot all pass the limit.
    if (options_.max_volumes_per_node > 0 && previous.Empty()) {  // A re-stage was counted.
      SH_ASSIGN_OR_RETURN(auto mine, store_.Load(record.volume_id()));
      if (!mine.has_value() &&
          static_cast<int64_t>(store_.List().size()) >= options_.max_volumes_per_node) {
        return absl::ResourceExhaustedError(absl::StrCat("this node already has ",
                                                         options_.max_volumes_per_node,
                                                         " volumes staged (the maximum)"));
      }
    }
    SH_ASSIGN_OR_RETURN(auto other, OtherVolumeOnLun(record, /*identity=*/nullptr));
    if (other) {
      SH_RETURN_IF_ERROR(ForgetRefusedStage(record, previous));
      return absl::FailedPreconditionError(absl::StrCat(
          "LUN ", target.lun, " of ", target.iqn, " is already used by volume '",
          other->volume_id(), "' (", DescribeRecord(*other),
          "); one LUN cannot back two volumes: unstage the other volume first, or fix the "
          "volume_context of this one"));
    }
    // Persist before any side effect (safety rule 3).
    SH_RETURN_IF_ERROR(WithContext(store_.Save(record), "persist volume record"));
  }
  absl::Cleanup undo = [&] {
    // A refused LUN: the attach undid what it made, and what is left on that LUN (a kernel
    // session's disk) is not this volume's; a detach of this record, which does not know its
    // device, could take it.
    // A re-stage keeps the identity it staged before (ForgetRefusedStage after the teardown):
    // the next retry must still find that very LUN, not whatever the number names now.
    absl::Status s = vetoed ? ForgetRefusedStage(record, previous) : TearDown(record);
    if (s.ok() && !vetoed && !previous.Empty()) {
      s = ForgetRefusedStage(record, previous);
    }
    if (!s.ok()) {
      Log().error("stage volume='{}': cleanup after failure failed: {}", req.volume_id(), s);
    }
  };

  const auto started = std::chrono::steady_clock::now();
  auto elapsed_ms = [&started] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
        .count();
  };
  SH_ASSIGN_OR_RETURN(iscsi::Attachment a, deps_.transport.Attach(attach));
  Log().debug("stage volume='{}' attached device={} after {:.1f} ms", req.volume_id(), a.device,
              elapsed_ms());
  *record.mutable_session() = a.session;
  iscsi::ToProto(a.identity, record.mutable_identity());
  record.set_capacity_bytes(a.capacity.Bytes());
  SH_RETURN_IF_ERROR(WithContext(store_.Save(record), "persist volume record"));
  if (cap.block) {
    // A block consumer owns the LUN's bytes: no format of ours is to be finished on it.
    SH_RETURN_IF_ERROR(ForgetFormatIntent(record.volume_id()));
  } else {
    SH_RETURN_IF_ERROR(MountStaged(record, a.device, cap));
    Log().debug("stage volume='{}' mounted after {:.1f} ms (formatted: {})", req.volume_id(),
                elapsed_ms(), record.formatted_by_us());
  }
  record.set_phase(VolumeRecord::STAGED);
  SH_RETURN_IF_ERROR(WithContext(store_.Save(record), "persist volume record"));
  std::move(undo).Cancel();
  return absl::OkStatus();
}

absl::Status NodeService::ForgetRefusedStage(VolumeRecord& record,
                                             const iscsi::LunIdentity& previous) {
  if (previous.Empty()) {
    return store_.Remove(record.volume_id());
  }
  iscsi::ToProto(previous, record.mutable_identity());
  record.clear_session();
  return WithContext(store_.Save(record), "persist volume record");
}

absl::Status NodeService::VetIdentity(VolumeRecord& record, const iscsi::LunIdentity& identity,
                                      const iscsi::LunIdentity& previous,
                                      const iscsi::TargetSpec& target) {
  std::lock_guard claim(claims_mu_);
  SH_ASSIGN_OR_RETURN(auto other, OtherVolumeOnLun(record, &identity));
  if (other) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the LUN at ", target.iqn, " LUN ", target.lun, " (", iscsi::DescribeIdentity(identity),
        ") is already used by volume '", other->volume_id(), "' (", DescribeRecord(*other),
        "); one LUN cannot back two volumes. If these are different LUNs, give them unique "
        "identities (WWN, serial) on the target"));
  }
  if (!previous.Empty()) {
    // A re-stage must find the LUN it staged before: a reused LUN number must not hand this
    // volume another application's disk.
    SH_RETURN_IF_ERROR(iscsi::CheckSameLun(previous, identity));
  }
  iscsi::ToProto(identity, record.mutable_identity());
  // A crash before the attach returns leaves this prepared session record: its teardown then
  // deletes only disks that still report this identity (kernel transport).
  iscsi::ToProto(identity, record.mutable_session()->mutable_identity());
  return WithContext(store_.Save(record), "persist volume record");
}

absl::StatusOr<std::optional<VolumeRecord>> NodeService::OtherVolumeOnLun(
    const VolumeRecord& record, const iscsi::LunIdentity* identity) const {
  std::vector<std::string> errors;
  std::vector<VolumeRecord> records = store_.List(&errors);
  if (!errors.empty()) {
    // A record that cannot be read may be the one holding this LUN: fail closed.
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot tell whether another volume uses this LUN: ", absl::StrJoin(errors, "; "),
        "; repair or remove the record"));
  }
  for (VolumeRecord& other : records) {
    if (other.volume_id() == record.volume_id()) {
      continue;
    }
    if (identity != nullptr) {
      const iscsi::LunIdentity theirs = iscsi::FromProto(other.identity());
      if (!identity->Empty() && !theirs.Empty() && iscsi::CheckSameLun(theirs, *identity).ok()) {
        return std::optional<VolumeRecord>(std::move(other));
      }
      continue;
    }
    if (other.iqn() != record.iqn() || other.lun() != record.lun()) {
      continue;
    }
    for (const auto& mine : record.portals()) {
      for (const auto& theirs : other.portals()) {
        if (mine.port() == theirs.port() && iscsi::SameAddress(mine.host(), theirs.host())) {
          return std::optional<VolumeRecord>(std::move(other));
        }
      }
    }
  }
  return std::optional<VolumeRecord>();
}

absl::Status NodeService::RecordFormatIntent(const VolumeRecord& record,
                                             const std::string& fs_type) {
  if (iscsi::FromProto(record.identity()).Empty()) {
    return absl::OkStatus();  // Without an identity, a later stage could not prove the same LUN.
  }
  VolumeRecord intent;
  intent.set_volume_id(record.volume_id());
  *intent.mutable_identity() = record.identity();
  intent.set_fs_type(fs_type);
  return WithContext(format_intents_.Save(intent), "record the format about to start");
}

absl::Status NodeService::ForgetFormatIntent(const std::string& volume_id) {
  return WithContext(format_intents_.Remove(volume_id),
                     "remove the record of a format in progress");
}

absl::StatusOr<bool> NodeService::InterruptedFormatIsOurs(const VolumeRecord& record,
                                                          const std::string& fs_type) const {
  SH_ASSIGN_OR_RETURN(auto intent, format_intents_.Load(record.volume_id()));
  if (!intent.has_value() || intent->fs_type() != fs_type) {
    return false;
  }
  const iscsi::LunIdentity started_on = iscsi::FromProto(intent->identity());
  const iscsi::LunIdentity now = iscsi::FromProto(record.identity());
  return !started_on.Empty() && !now.Empty() && iscsi::CheckSameLun(started_on, now).ok();
}

absl::Status NodeService::MountStaged(VolumeRecord& record, const std::string& device,
                                      const CapabilitySpec& cap) {
  auto step = std::chrono::steady_clock::now();
  auto step_ms = [&step] {
    const auto now = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - step).count();
    step = now;
    return ms;
  };
  SH_ASSIGN_OR_RETURN(mounter::ProbeResult probe, deps_.probe.Probe(device));
  Log().debug("stage volume='{}': probe of {} took {:.1f} ms", record.volume_id(), device,
              step_ms());
  absl::StatusOr<mounter::FormatAction> decision = mounter::DecideFormat(probe, cap.fs_type);
  if (!decision.ok() && probe.kind == mounter::ProbeResult::Kind::kNotZeroed) {
    // Data without any signature is what an mkfs cut short (kill -9, a crash) leaves: only the
    // stage that started that format, on the same LUN, may finish it.
    SH_ASSIGN_OR_RETURN(bool ours, InterruptedFormatIsOurs(record, cap.fs_type));
    if (ours) {
      Log().warn(
          "stage volume='{}': finishing the {} format an earlier stage of this volume "
          "started on this LUN",
          record.volume_id(), cap.fs_type);
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
    SH_RETURN_IF_ERROR(RecordFormatIntent(record, cap.fs_type));
    SH_RETURN_IF_ERROR(deps_.format(device, cap.fs_type));
    record.set_formatted_by_us(true);
  } else if (!cap.read_only_mode) {
    SH_RETURN_IF_ERROR(deps_.check(device, cap.fs_type));
  }
  // The format is complete (or was never ours to finish: the LUN holds a filesystem now).
  SH_RETURN_IF_ERROR(ForgetFormatIntent(record.volume_id()));
  Log().debug("stage volume='{}': {} took {:.1f} ms", record.volume_id(),
              record.formatted_by_us() ? "format" : "check", step_ms());
  SH_RETURN_IF_ERROR(MakeDirs(record.staging_path(), 0750));
  mounter::MountRequest m;
  m.source = device;
  m.target = record.staging_path();
  m.fstype = cap.fs_type;
  m.options = cap.mount_flags;
  if (cap.read_only_mode) {
    // A read-only mount still replays a dirty journal (it writes the LUN) unless told not to:
    // a reader must not change what other readers, or a later writer, see.
    m.options.push_back("ro");
    m.options.push_back(cap.fs_type == "xfs" ? "norecovery" : "noload");
  }
  return deps_.mounter.Mount(m);
}

// ----- NodeUnstageVolume -----

absl::Status NodeService::Unstage(const csi::v1::NodeUnstageVolumeRequest& req) {
  if (req.volume_id().empty()) {
    return absl::InvalidArgumentError("volume_id is required");
  }
  if (req.staging_target_path().empty()) {
    return absl::InvalidArgumentError("staging_target_path is required");
  }
  VolumeLocks::Guard guard(locks_, req.volume_id());
  if (!guard.held()) {
    return VolumeLocks::BusyError(req.volume_id());
  }
  SH_ASSIGN_OR_RETURN(auto existing, store_.Load(req.volume_id()));
  if (!existing.has_value()) {
    // Not staged here (or unstaged already): idempotent success, the path left as it is. A
    // malformed path cannot be a mount of ours either.
    if (!ValidatePathField(req.staging_target_path(), "staging_target_path").ok()) {
      return absl::OkStatus();
    }
    auto m = deps_.mounter.Find(req.staging_target_path());
    SH_RETURN_IF_ERROR(m.status());
    if (m->has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("staging path '", req.staging_target_path(),
                       "' is mounted but stagehand has no record of "
                       "volume '",
                       req.volume_id(), "'; refusing to unmount what it did not mount"));
    }
    // Already unstaged. A format a failed stage of it left unfinished is not finished later.
    return ForgetFormatIntent(req.volume_id());
  }
  VolumeRecord& rec = *existing;
  if (rec.staging_path() != req.staging_target_path()) {
    return absl::FailedPreconditionError(
        absl::StrCat("volume '", req.volume_id(), "' is staged at '", rec.staging_path(),
                     "', not at '", req.staging_target_path(), "'"));
  }
  // Never unstage under a publish: a bind mount would keep using a dead device.
  if (std::vector<std::string> still = StillPublished(rec); !still.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("volume '", req.volume_id(), "' is still published at ",
                     absl::StrJoin(still, ", "), "; unpublish it first"));
  }
  SH_RETURN_IF_ERROR(TearDown(rec));
  // Unstaged on purpose: a format this volume left unfinished is not finished later (data
  // without a signature that shows up on the LUN afterwards is never formatted).
  return ForgetFormatIntent(req.volume_id());
}

// ----- NodePublishVolume -----

absl::Status NodeService::Publish(const csi::v1::NodePublishVolumeRequest& req) {
  // Missing fields first, then an unknown volume (NOT_FOUND, as the CSI spec's error table and
  // csi-sanity expect), then what is wrong with the values.
  if (req.volume_id().empty()) {
    return absl::InvalidArgumentError("volume_id is required");
  }
  if (req.target_path().empty()) {
    return absl::InvalidArgumentError("target_path is required");
  }
  if (!req.has_volume_capability()) {
    return absl::InvalidArgumentError("volume_capability is required");
  }
  if (req.staging_target_path().empty()) {
    // The CSI spec's code when STAGE_UNSTAGE_VOLUME is claimed and no staging path is given.
    return absl::FailedPreconditionError(
        "staging_target_path is required: this driver stages volumes (STAGE_UNSTAGE_VOLUME); "
        "pass the path given to NodeStageVolume");
  }
  VolumeLocks::Guard guard(locks_, req.volume_id());
  if (!guard.held()) {
    return VolumeLocks::BusyError(req.volume_id());
  }
  SH_ASSIGN_OR_RETURN(auto existing, store_.Load(req.volume_id()));
  if (!existing.has_value()) {
    return absl::NotFoundError(absl::StrCat("volume '", req.volume_id(),
                                            "' is not staged on this node; call "
                                            "NodeStageVolume first"));
  }
  SH_RETURN_IF_ERROR(ValidatePathField(req.staging_target_path(), "staging_target_path"));
  SH_RETURN_IF_ERROR(ValidatePathField(req.target_path(), "target_path"));
  SH_RETURN_IF_ERROR(CheckNotReserved(req.target_path(), "target_path", ReservedDirs()));
  if (req.target_path() == req.staging_target_path() ||
      IsPathWithin(req.target_path(), req.staging_target_path())) {
    return absl::InvalidArgumentError(absl::StrCat("target_path '", req.target_path(),
                                                   "' must not be the staging path or inside it"));
  }
  SH_ASSIGN_OR_RETURN(CapabilitySpec cap, ParseCapability(req.volume_capability()));
  SH_RETURN_IF_ERROR(CheckParentIsReal(req.target_path(), "target_path"));
  SH_RETURN_IF_ERROR(CheckNoOverlap(req.volume_id(), req.target_path()));
  if (existing->phase() != VolumeRecord::STAGED) {
    return absl::FailedPreconditionError(absl::StrCat("volume '", req.volume_id(), "' is ",
                                                      DescribeRecord(*existing),
                                                      "; call NodeStageVolume again first"));
  }
  VolumeRecord& rec = *existing;
  if (rec.staging_path() != req.staging_target_path()) {
    return absl::FailedPreconditionError(
        absl::StrCat("volume '", req.volume_id(), "' is staged at '", rec.staging_path(),
                     "', not at '", req.staging_target_path(), "'"));
  }
  if (rec.block() != cap.block) {
    return absl::InvalidArgumentError(absl::StrCat(
        "volume '", req.volume_id(), "' was staged as ", rec.block() ? "block" : "mount",
        " but publish asks for ", cap.block ? "block" : "mount"));
  }
  // Never bind an empty staging directory or a dead device into a consumer: what it writes
  // would land on the host's disk, or fail.
  if (auto live = CheckStagingLive(rec); !live.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "volume '", req.volume_id(), "' is recorded as staged at '", rec.staging_path(), "' but ",
        live.message(), "; call NodeStageVolume again before publishing"));
  }
  const bool readonly = req.readonly() || cap.read_only_mode;
  for (const auto& p : rec.publishes()) {
    if (p.target_path() != req.target_path()) {
      continue;
    }
    if (p.readonly() != readonly || !SameFlags(p.mount_flags(), cap.mount_flags)) {
      return absl::AlreadyExistsError(absl::StrCat("volume '", req.volume_id(),
                                                   "' is already published at '", req.target_path(),
                                                   "' with different readonly or mount flags"));
    }
  }
  if (cap.access_mode == csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_SINGLE_WRITER ||
      rec.access_mode() == "SINGLE_NODE_SINGLE_WRITER") {
    // One workload at a time (CSI spec): a second target path is a second workload.
    for (const auto& p : rec.publishes()) {
      if (p.target_path() != req.target_path()) {
        return absl::FailedPreconditionError(
            absl::StrCat("volume '", req.volume_id(),
                         "' has access mode SINGLE_NODE_SINGLE_WRITER and is "
                         "already published at '",
                         p.target_path(), "'; unpublish it there first"));
      }
    }
  }
  auto mounted = deps_.mounter.Find(req.target_path());
  SH_RETURN_IF_ERROR(mounted.status());
  const bool recorded =
      std::any_of(rec.publishes().begin(), rec.publishes().end(),
                  [&](const PublishRecord& p) { return p.target_path() == req.target_path(); });
  if (mounted->has_value() && !recorded) {
    return absl::AlreadyExistsError(absl::StrCat(
        "target_path '", req.target_path(), "' already holds a mount that is not this volume's"));
  }
  if (!mounted->has_value()) {
    SH_RETURN_IF_ERROR(CheckTargetEmpty(req.target_path(), cap.block));
  }
  if (!recorded) {
    PublishRecord* p = rec.add_publishes();
    p->set_target_path(req.target_path());
    p->set_readonly(readonly);
    for (const auto& f : cap.mount_flags) {
      p->add_mount_flags(f);
    }
    SH_RETURN_IF_ERROR(WithContext(store_.Save(rec), "persist volume record"));
  }
  std::string source = rec.staging_path();
  if (cap.block) {
    source = iscsi::DeviceOf(rec.session());
    if (!PathExists(req.target_path())) {
      int fd = open(req.target_path().c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
      if (fd < 0) {
        return ErrnoStatus(errno, absl::StrCat("create target file '", req.target_path(), "'"));
      }
      close(fd);
    }
  } else {
    SH_RETURN_IF_ERROR(MakeDirs(req.target_path(), 0750));
  }
  std::vector<std::string> flags;
  for (const auto& f : cap.mount_flags) {
    // Filesystem options apply at the staging mount; the bind takes only per-mount flags.
    if (f == "nosuid" || f == "nodev" || f == "noexec" || f == "noatime" || f == "nodiratime" ||
        f == "relatime" || f == "strictatime") {
      flags.push_back(f);
    }
  }
  return deps_.mounter.Bind(source, req.target_path(), readonly, flags);
}

// ----- NodeUnpublishVolume -----

absl::Status NodeService::Unpublish(const csi::v1::NodeUnpublishVolumeRequest& req) {
  if (req.volume_id().empty()) {
    return absl::InvalidArgumentError("volume_id is required");
  }
  if (req.target_path().empty()) {
    return absl::InvalidArgumentError("target_path is required");
  }
  VolumeLocks::Guard guard(locks_, req.volume_id());
  if (!guard.held()) {
    return VolumeLocks::BusyError(req.volume_id());
  }
  SH_ASSIGN_OR_RETURN(auto existing, store_.Load(req.volume_id()));
  if (!ValidatePathField(req.target_path(), "target_path").ok()) {
    // Never a path this driver published to (those were validated): nothing of ours is there.
    return absl::OkStatus();
  }
  auto mounted = deps_.mounter.Find(req.target_path());
  SH_RETURN_IF_ERROR(mounted.status());
  int index = -1;
  if (existing.has_value()) {
    for (int i = 0; i < existing->publishes_size(); ++i) {
      if (existing->publishes(i).target_path() == req.target_path()) {
        index = i;
      }
    }
  }
  if (index < 0) {
    if (mounted->has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("target_path '", req.target_path(),
                       "' is mounted but stagehand has no record of "
                       "publishing volume '",
                       req.volume_id(), "' there; refusing to unmount it"));
    }
    // Already unpublished, or never published by us: whatever is at the path is not ours to
    // remove (what this driver creates there is removed with its publish record).
    return absl::OkStatus();
  }
  if (mounted->has_value()) {
    SH_RETURN_IF_ERROR(deps_.mounter.Unmount(req.target_path()));
  }
  SH_RETURN_IF_ERROR(RemoveTarget(req.target_path()));
  existing->mutable_publishes()->DeleteSubrange(index, 1);
  return WithContext(store_.Save(*existing), "persist volume record");
}

// ----- NodeGetVolumeStats -----

absl::Status NodeService::Stats(const csi::v1::NodeGetVolumeStatsRequest& req,
                                csi::v1::NodeGetVolumeStatsResponse* resp) {
  if (req.volume_id().empty()) {
    return absl::InvalidArgumentError("volume_id is required");
  }
  if (req.volume_path().empty()) {
    return absl::InvalidArgumentError("volume_path is required");
  }
  // An unknown volume, or a path that is not one of its (those were validated when recorded, so
  // a malformed path is simply not one of them), is NOT_FOUND (CSI spec, csi-sanity).
  SH_ASSIGN_OR_RETURN(auto existing, store_.Load(req.volume_id()));
  if (!existing.has_value() || existing->phase() != VolumeRecord::STAGED) {
    return absl::NotFoundError(absl::StrCat("volume '", req.volume_id(), "' is not staged here"));
  }
  const VolumeRecord& rec = *existing;
  bool known = rec.staging_path() == req.volume_path();
  bool readonly_requested = rec.access_mode() == "SINGLE_NODE_READER_ONLY" ||
                            rec.access_mode() == "MULTI_NODE_READER_ONLY";
  for (const auto& p : rec.publishes()) {
    if (p.target_path() == req.volume_path()) {
      known = true;
      readonly_requested = readonly_requested || p.readonly();
    }
  }
  if (!known || !PathExists(req.volume_path())) {
    return absl::NotFoundError(absl::StrCat("volume_path '", req.volume_path(),
                                            "' is not where volume '", req.volume_id(),
                                            "' is staged or published"));
  }
  std::vector<std::string> problems;
  if (rec.block()) {
    auto size = mounter::BlockDeviceSize(iscsi::DeviceOf(rec.session()));
    if (size.ok()) {
      auto* u = resp->add_usage();
      u->set_unit(csi::v1::VolumeUsage::BYTES);
      u->set_total(*size);
    } else {
      problems.push_back(std::string(size.status().message()));
    }
  } else {
    auto st = mounter::StatFilesystem(req.volume_path());
    if (!st.ok()) {
      return st.status();
    }
    auto* bytes = resp->add_usage();
    bytes->set_unit(csi::v1::VolumeUsage::BYTES);
    bytes->set_total(st->capacity_bytes);
    bytes->set_available(st->available_bytes);
    bytes->set_used(st->used_bytes);
    auto* inodes = resp->add_usage();
    inodes->set_unit(csi::v1::VolumeUsage::INODES);
    inodes->set_total(st->inodes);
    inodes->set_available(st->inodes_free);
    inodes->set_used(st->inodes_used);
    if (st->read_only && !readonly_requested) {
      problems.push_back(
          "the filesystem is read-only although it was mounted read-write "
          "(I/O errors made the kernel remount it; check the target and dmesg)");
    }
  }
  const iscsi::SessionHealth health = deps_.transport.Health(rec.session());
  if (!health.healthy) {
    problems.insert(problems.begin(), health.message);
  }
  auto* cond = resp->mutable_volume_condition();
  cond->set_abnormal(!problems.empty());
  cond->set_message(problems.empty() ? "volume is healthy" : absl::StrJoin(problems, "; "));
  return absl::OkStatus();
}

// ----- NodeExpandVolume -----

absl::StatusOr<int64_t> NodeService::Expand(const csi::v1::NodeExpandVolumeRequest& req) {
  if (req.volume_id().empty()) {
    return absl::InvalidArgumentError("volume_id is required");
  }
  if (req.volume_path().empty()) {
    return absl::InvalidArgumentError("volume_path is required");
  }
  VolumeLocks::Guard guard(locks_, req.volume_id());
  if (!guard.held()) {
    return VolumeLocks::BusyError(req.volume_id());
  }
  SH_ASSIGN_OR_RETURN(auto existing, store_.Load(req.volume_id()));
  if (!existing.has_value() || existing->phase() != VolumeRecord::STAGED) {
    return absl::NotFoundError(absl::StrCat("volume '", req.volume_id(), "' is not staged here"));
  }
  VolumeRecord& rec = *existing;
  const bool known =
      rec.staging_path() == req.volume_path() ||
      std::any_of(rec.publishes().begin(), rec.publishes().end(),
                  [&](const PublishRecord& p) { return p.target_path() == req.volume_path(); });
  if (!known || !PathExists(req.volume_path())) {
    return absl::NotFoundError(absl::StrCat("volume_path '", req.volume_path(),
                                            "' is not where volume '", req.volume_id(),
                                            "' is staged or published"));
  }
  // The target grows the LUN; we pick the new size up, then grow the filesystem online.
  SH_ASSIGN_OR_RETURN(uint64_t bytes, deps_.transport.RefreshCapacity(rec.session()));
  const int64_t required = req.capacity_range().required_bytes();
  if (required > 0 && static_cast<int64_t>(bytes) < required) {
    return absl::OutOfRangeError(
        absl::StrCat("the LUN is ", bytes, " bytes but ", required,
                     " were required; grow the LUN on the target (controller expansion) first"));
  }
  if (!rec.block()) {
    SH_RETURN_IF_ERROR(
        WithContext(deps_.grow(iscsi::DeviceOf(rec.session()), rec.staging_path(), rec.fs_type()),
                    absl::StrCat("grow the ", rec.fs_type(), " filesystem")));
  }
  rec.set_capacity_bytes(bytes);
  SH_RETURN_IF_ERROR(WithContext(store_.Save(rec), "persist volume record"));
  return static_cast<int64_t>(bytes);
}

// ----- gRPC entry points -----

grpc::Status NodeService::NodeStageVolume(grpc::ServerContext*,
                                          const csi::v1::NodeStageVolumeRequest* req,
                                          csi::v1::NodeStageVolumeResponse*) {
  return ToGrpcStatus(LogResult("NodeStageVolume", req->volume_id(), Stage(*req)));
}

grpc::Status NodeService::NodeUnstageVolume(grpc::ServerContext*,
                                            const csi::v1::NodeUnstageVolumeRequest* req,
                                            csi::v1::NodeUnstageVolumeResponse*) {
  return ToGrpcStatus(LogResult("NodeUnstageVolume", req->volume_id(), Unstage(*req)));
}

grpc::Status NodeService::NodePublishVolume(grpc::ServerContext*,
                                            const csi::v1::NodePublishVolumeRequest* req,
                                            csi::v1::NodePublishVolumeResponse*) {
  return ToGrpcStatus(LogResult("NodePublishVolume", req->volume_id(), Publish(*req)));
}

grpc::Status NodeService::NodeUnpublishVolume(grpc::ServerContext*,
                                              const csi::v1::NodeUnpublishVolumeRequest* req,
                                              csi::v1::NodeUnpublishVolumeResponse*) {
  return ToGrpcStatus(LogResult("NodeUnpublishVolume", req->volume_id(), Unpublish(*req)));
}

grpc::Status NodeService::NodeGetVolumeStats(grpc::ServerContext*,
                                             const csi::v1::NodeGetVolumeStatsRequest* req,
                                             csi::v1::NodeGetVolumeStatsResponse* resp) {
  return ToGrpcStatus(Stats(*req, resp));
}

grpc::Status NodeService::NodeExpandVolume(grpc::ServerContext*,
                                           const csi::v1::NodeExpandVolumeRequest* req,
                                           csi::v1::NodeExpandVolumeResponse* resp) {
  auto bytes = Expand(*req);
  if (bytes.ok()) {
    resp->set_capacity_bytes(*bytes);
  }
  return ToGrpcStatus(LogResult("NodeExpandVolume", req->volume_id(), bytes.status()));
}

grpc::Status NodeService::NodeGetCapabilities(grpc::ServerContext*,
                                              const csi::v1::NodeGetCapabilitiesRequest*,
                                              csi::v1::NodeGetCapabilitiesResponse* resp) {
  for (auto type :
       {NodeServiceCapability::RPC::STAGE_UNSTAGE_VOLUME,
        NodeServiceCapability::RPC::GET_VOLUME_STATS, NodeServiceCapability::RPC::VOLUME_CONDITION,
        NodeServiceCapability::RPC::SINGLE_NODE_MULTI_WRITER,
        NodeServiceCapability::RPC::EXPAND_VOLUME}) {
    resp->add_capabilities()->mutable_rpc()->set_type(type);
  }
  return grpc::Status::OK;
}

grpc::Status NodeService::NodeGetInfo(grpc::ServerContext*, const csi::v1::NodeGetInfoRequest*,
                                      csi::v1::NodeGetInfoResponse* resp) {
  resp->set_node_id(options_.node_id);
  resp->set_max_volumes_per_node(options_.max_volumes_per_node);
  return grpc::Status::OK;
}

}  // namespace stagehand::agent

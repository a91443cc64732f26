#include "driver/node_service.h"

#include <algorithm>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <spdlog/spdlog.h>

#include "base/file_io.h"
#include "base/log.h"
#include "base/paths.h"
#include "driver/csi_validation.h"
#include "driver/node_room.h"
#include "driver/target_path.h"
#include "mounter/filesystem.h"
#include "mounter/mount_options.h"
#include "mounter/volume_stats.h"
#include "proto/grpc_status.h"

namespace stagehand::driver {
namespace {

constexpr LogComponent kComponent = LogComponent::kCsi;

using csi::v1::NodeServiceCapability;
using Phase = StagedVolume::Phase;

std::map<std::string, std::string> ToMap(const google::protobuf::Map<std::string, std::string>& m) {
  return {m.begin(), m.end()};
}

absl::Status LogResult(std::string_view rpc, const std::string& volume_id, absl::Status s) {
  if (s.ok()) {
    Log(kComponent).info("{} volume='{}' ok", rpc, volume_id);
  } else if (s.code() == absl::StatusCode::kInvalidArgument ||
             s.code() == absl::StatusCode::kAborted || s.code() == absl::StatusCode::kNotFound) {
    Log(kComponent).debug("{} volume='{}' rejected: {}", rpc, volume_id, s);
  } else {
    Log(kComponent).warn("{} volume='{}' failed: {}", rpc, volume_id, s);
  }
  return s;
}

}  // namespace

NodeService::NodeService(NodeServiceDeps deps, NodeServiceOptions options)
    : deps_(std::move(deps)),
      options_(std::move(options)),
      store_(RecordsDir()),
      health_(deps_.transport, deps_.mounter),
      stager_(deps_, options_, store_) {
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

std::string NodeService::RecordsDir() const {
  return JoinPath(options_.state_dir, "volumes");
}

std::vector<std::string> NodeService::ReservedDirs() const {
  return {RecordsDir(), stager_.FormatIntentsDir(), stager_.SessionsDir()};
}

// ----- NodeStageVolume -----

absl::Status NodeService::Stage(const csi::v1::NodeStageVolumeRequest& req) {
  // Every string bounded before anything else: nothing of the caller's may grow without limit.
  SH_RETURN_IF_ERROR(ValidateVolumeId(req.volume_id()));
  SH_RETURN_IF_ERROR(ValidateStringMap(req.volume_context(), "volume_context"));
  SH_RETURN_IF_ERROR(ValidateStringMap(req.publish_context(), "publish_context"));
  SH_RETURN_IF_ERROR(ValidateStringMap(req.secrets(), "secrets", /*secret=*/true));
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
  SH_RETURN_IF_ERROR(deps_.transport.Chosen(ToMap(req.volume_context())).status());
  SH_RETURN_IF_ERROR(CheckParentIsReal(req.staging_target_path(), "staging_target_path"));

  VolumeLocks::Guard guard(locks_, req.volume_id());
  if (!guard.held()) {
    return VolumeLocks::BusyError(req.volume_id());
  }
  SH_ASSIGN_OR_RETURN(auto existing, store_.Load(req.volume_id()));
  if (existing.has_value()) {
    StagedVolume& rec = *existing;
    if (rec.staging_path != req.staging_target_path() && rec.phase == Phase::kStaged) {
      return absl::FailedPreconditionError(
          absl::StrCat("volume '", req.volume_id(), "' is already staged at '", rec.staging_path,
                       "'; unstage it there first"));
    }
    const bool same = rec.capability == cap && rec.volume_context == ToMap(req.volume_context());
    if (rec.phase == Phase::kStaged && !same) {
      return absl::AlreadyExistsError(
          absl::StrCat("volume '", req.volume_id(), "' is already staged at '", rec.staging_path,
                       "' with a different capability or volume_context"));
    }
    if (same && health_.CheckStagingLive(rec).ok()) {
      return absl::OkStatus();  // Idempotent repeat.
    }
    // Never tear a staging down under its publishes: the bind mounts would stay on a dead
    // device, or a second session and loop device would mount the same filesystem twice (the
    // kubelet repeats NodeStageVolume, e.g. for every volume after its own restart, also while
    // a session reconnects after a target blip).
    if (std::vector<std::string> still = health_.StillPublished(rec); !still.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "volume '", req.volume_id(), "' is published at ", absl::StrJoin(still, ", "),
          " but its staging is not usable (", health_.CheckStagingLive(rec).message(),
          "); stagehand does not rebuild a staging under live publishes: unpublish them, then "
          "stage again"));
    }
    // Half-done (crash mid-stage), or staged but broken (session died, host rebooted) with no
    // publish left: undo what is left and stage again. The identity recorded last time must
    // still match.
    SH_RETURN_IF_ERROR(WithContext(stager_.TearDown(rec), "clean up the previous stage attempt"));
    return stager_.Stage(req, rec.identity, cap, *target);
  }
  return stager_.Stage(req, iscsi::LunIdentity(), cap, *target);
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
    return stager_.ForgetFormatIntent(req.volume_id());
  }
  StagedVolume& rec = *existing;
  if (rec.staging_path != req.staging_target_path()) {
    return absl::FailedPreconditionError(
        absl::StrCat("volume '", req.volume_id(), "' is staged at '", rec.staging_path,
                     "', not at '", req.staging_target_path(), "'"));
  }
  // Never unstage under a publish: a bind mount would keep using a dead device.
  if (std::vector<std::string> still = health_.StillPublished(rec); !still.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("volume '", req.volume_id(), "' is still published at ",
                     absl::StrJoin(still, ", "), "; unpublish it first"));
  }
  SH_RETURN_IF_ERROR(stager_.TearDown(rec));
  // Unstaged on purpose: a format this volume left unfinished is not finished later (data
  // without a signature that shows up on the LUN afterwards is never formatted).
  return stager_.ForgetFormatIntent(req.volume_id());
}

// ----- NodePublishVolume -----

namespace {

// Missing fields first (then an unknown volume is NOT_FOUND, then what is wrong with the
// values), as the CSI spec's error table and csi-sanity expect.
absl::Status CheckPublishFields(const csi::v1::NodePublishVolumeRequest& req) {
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
  return absl::OkStatus();
}

// The flags a bind mount takes: filesystem options apply at the staging mount only.
std::vector<std::string> BindFlags(const std::vector<std::string>& mount_flags) {
  std::vector<std::string> flags;
  for (const auto& f : mount_flags) {
    if (f == "nosuid" || f == "nodev" || f == "noexec" || f == "noatime" || f == "nodiratime" ||
        f == "relatime" || f == "strictatime") {
      flags.push_back(f);
    }
  }
  return flags;
}

}  // namespace

absl::Status NodeService::CheckPublishPaths(const csi::v1::NodePublishVolumeRequest& req) const {
  SH_RETURN_IF_ERROR(ValidatePathField(req.staging_target_path(), "staging_target_path"));
  SH_RETURN_IF_ERROR(ValidatePathField(req.target_path(), "target_path"));
  SH_RETURN_IF_ERROR(CheckNotReserved(req.target_path(), "target_path", ReservedDirs()));
  if (req.target_path() == req.staging_target_path() ||
      IsPathWithin(req.target_path(), req.staging_target_path())) {
    return absl::InvalidArgumentError(absl::StrCat("target_path '", req.target_path(),
                                                   "' must not be the staging path or inside it"));
  }
  return absl::OkStatus();
}

namespace {

// MULTI_NODE_SINGLE_WRITER: read on any node, written on one, chosen at publish.
bool IsSingleWriterAcrossNodes(const StagedVolume& volume) {
  return volume.capability.access_mode ==
         csi::v1::VolumeCapability::AccessMode::MULTI_NODE_SINGLE_WRITER;
}

}  // namespace

absl::Status NodeService::CheckPublishable(const csi::v1::NodePublishVolumeRequest& req,
                                           const StagedVolume& rec, const CapabilitySpec& cap,
                                           bool readonly) const {
  if (rec.phase != Phase::kStaged) {
    return absl::FailedPreconditionError(absl::StrCat("volume '", req.volume_id(), "' is ",
                                                      DescribeStage(rec),
                                                      "; call NodeStageVolume again first"));
  }
  if (rec.staging_path != req.staging_target_path()) {
    return absl::FailedPreconditionError(
        absl::StrCat("volume '", req.volume_id(), "' is staged at '", rec.staging_path,
                     "', not at '", req.staging_target_path(), "'"));
  }
  if (rec.capability.block != cap.block) {
    return absl::InvalidArgumentError(absl::StrCat(
        "volume '", req.volume_id(), "' was staged as ", rec.capability.block ? "block" : "mount",
        " but publish asks for ", cap.block ? "block" : "mount"));
  }
  // Never bind an empty staging directory or a dead device into a consumer: what it writes
  // would land on the host's disk, or fail.
  if (auto live = health_.CheckStagingLive(rec); !live.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("volume '", req.volume_id(), "' is recorded as staged at '", rec.staging_path,
                     "' but ", live.message(), "; call NodeStageVolume again before publishing"));
  }
  // A filesystem mounted with `context=` has that SELinux context for every file and every bind
  // of it; the kubelet passes the pod's context to both the stage and the publish.
  if (!cap.block) {
    const std::string staged = mounter::SelinuxContext(rec.capability.mount_flags);
    const std::string wanted = mounter::SelinuxContext(cap.mount_flags);
    if (staged != wanted) {
      return absl::FailedPreconditionError(absl::StrCat(
          "volume '", req.volume_id(), "' is staged ",
          staged.empty() ? "without an SELinux context"
                         : absl::StrCat("with SELinux context '", staged, "'"),
          " but this publish asks for ",
          wanted.empty() ? "none" : absl::StrCat("context '", wanted, "'"),
          "; a mounted filesystem has one context: unpublish and unstage it everywhere on this "
          "node first, or give the pods the same SELinux level"));
    }
  }
  if (const Publication* p = rec.FindPublication(req.target_path());
      p != nullptr && (p->readonly != readonly || p->mount_flags != cap.mount_flags)) {
    return absl::AlreadyExistsError(absl::StrCat("volume '", req.volume_id(),
                                                 "' is already published at '", req.target_path(),
                                                 "' with different readonly or mount flags"));
  }
  if (cap.access_mode == csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_SINGLE_WRITER ||
      rec.capability.access_mode ==
          csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_SINGLE_WRITER) {
    // One workload at a time (CSI spec): a second target path is a second workload.
    for (const Publication& p : rec.publications) {
      if (p.target_path != req.target_path()) {
        return absl::FailedPreconditionError(
            absl::StrCat("volume '", req.volume_id(),
                         "' has access mode SINGLE_NODE_SINGLE_WRITER and is "
                         "already published at '",
                         p.target_path, "'; unpublish it there first"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status NodeService::Publish(const csi::v1::NodePublishVolumeRequest& req) {
  SH_RETURN_IF_ERROR(CheckPublishFields(req));
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
  SH_RETURN_IF_ERROR(ValidateStringMap(req.volume_context(), "volume_context"));
  SH_RETURN_IF_ERROR(ValidateStringMap(req.publish_context(), "publish_context"));
  SH_RETURN_IF_ERROR(ValidateStringMap(req.secrets(), "secrets", /*secret=*/true));
  SH_RETURN_IF_ERROR(CheckPublishPaths(req));
  SH_ASSIGN_OR_RETURN(CapabilitySpec cap, ParseCapability(req.volume_capability()));
  SH_RETURN_IF_ERROR(CheckParentIsReal(req.target_path(), "target_path"));
  SH_RETURN_IF_ERROR(CheckNoOverlap(store_.List(), req.volume_id(), req.target_path()));
  StagedVolume& rec = *existing;
  const bool readonly = req.readonly() || cap.read_only_mode;
  SH_RETURN_IF_ERROR(CheckPublishable(req, rec, cap, readonly));
  auto mounted = deps_.mounter.Find(req.target_path());
  SH_RETURN_IF_ERROR(mounted.status());
  const bool recorded = rec.FindPublication(req.target_path()) != nullptr;
  if (mounted->has_value() && !recorded) {
    return absl::AlreadyExistsError(absl::StrCat(
        "target_path '", req.target_path(), "' already holds a mount that is not this volume's"));
  }
  if (!mounted->has_value()) {
    SH_RETURN_IF_ERROR(CheckTargetEmpty(req.target_path(), cap.block));
  }
  if (!recorded) {
    rec.publications.push_back(Publication{
        .target_path = req.target_path(), .readonly = readonly, .mount_flags = cap.mount_flags});
    SH_RETURN_IF_ERROR(WithContext(store_.Save(rec), "persist volume record"));
  }
  if (IsSingleWriterAcrossNodes(rec) && !readonly) {
    // Its stage read only: the first read-write publish makes this node the writer, before
    // the consumer gets the device, and after the publish is recorded (an unpublish of it, or a
    // retry after a crash, finds what to give up).
    if (absl::Status claimed = stager_.SetWriter(rec, /*write=*/true); !claimed.ok()) {
      if (!recorded) {
        std::erase_if(rec.publications,
                      [&](const Publication& p) { return p.target_path == req.target_path(); });
        (void)store_.Save(rec);  // Left recorded, its unpublish has nothing to undo.
      }
      return claimed;
    }
  }
  std::string source = rec.staging_path;
  if (cap.block) {
    source = rec.Device();
    SH_RETURN_IF_ERROR(CreateBlockTarget(req.target_path()));
  } else {
    SH_RETURN_IF_ERROR(MakeDirs(req.target_path(), 0750));
  }
  return deps_.mounter.Bind(source, req.target_path(), readonly, BindFlags(cap.mount_flags));
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
  if (!existing.has_value() || existing->FindPublication(req.target_path()) == nullptr) {
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
  if (IsSingleWriterAcrossNodes(*existing) &&
      !existing->FindPublication(req.target_path())->readonly &&
      std::none_of(existing->publications.begin(), existing->publications.end(),
                   [&](const Publication& p) {
                     return !p.readonly && p.target_path != req.target_path();
                   })) {
    // The last read-write publish is gone: another node may write now. Given up before the
    // publish is forgotten, so that a retry gives it up again.
    SH_RETURN_IF_ERROR(stager_.SetWriter(*existing, /*write=*/false));
  }
  std::erase_if(existing->publications,
                [&](const Publication& p) { return p.target_path == req.target_path(); });
  return WithContext(store_.Save(*existing), "persist volume record");
}

// ----- NodeExpandVolume -----

// The codes follow what the kubelet reads from them (RecoverVolumeExpansionFailure, GA in 1.34):
// INVALID_ARGUMENT, OUT_OF_RANGE and NOT_FOUND mark the resize infeasible, so the user can go
// back to a smaller size; every other code is retried. A LUN the target has not grown yet, a
// session or path that is down, a busy volume are therefore never one of those three.
namespace {

// A failure of the LUN's refresh or the filesystem's growth is not the request's fault: whatever
// errno it came from (ENOENT of a status file, ESRCH of a session, EINVAL of an ioctl), the
// kubelet must retry it.
absl::Status Retryable(absl::Status s) {
  if (absl::IsNotFound(s) || absl::IsInvalidArgument(s) || absl::IsOutOfRange(s)) {
    return absl::UnavailableError(s.message());
  }
  return s;
}

}  // namespace

absl::StatusOr<int64_t> NodeService::Expand(const csi::v1::NodeExpandVolumeRequest& req) {
  if (req.volume_id().empty()) {
    return absl::InvalidArgumentError("volume_id is required");
  }
  if (req.volume_path().empty()) {
    return absl::InvalidArgumentError("volume_path is required");
  }
  const int64_t required = req.capacity_range().required_bytes();
  const int64_t limit = req.capacity_range().limit_bytes();
  if (required < 0 || limit < 0 || (limit > 0 && required > limit)) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity_range: required_bytes ", required, " and limit_bytes ", limit,
                     " must not be negative, and required_bytes must not exceed limit_bytes"));
  }
  VolumeLocks::Guard guard(locks_, req.volume_id());
  if (!guard.held()) {
    return VolumeLocks::BusyError(req.volume_id());
  }
  SH_ASSIGN_OR_RETURN(auto existing, store_.Load(req.volume_id()));
  if (!existing.has_value()) {
    return absl::NotFoundError(absl::StrCat("volume '", req.volume_id(), "' is not staged here"));
  }
  StagedVolume& rec = *existing;
  if (rec.phase != Phase::kStaged) {
    return absl::FailedPreconditionError(absl::StrCat(
        "volume '", req.volume_id(), "' is ", DescribeStage(rec), "; expand it once it is staged"));
  }
  const bool known =
      rec.staging_path == req.volume_path() || rec.FindPublication(req.volume_path()) != nullptr;
  if (!known || !PathExists(req.volume_path())) {
    return absl::NotFoundError(absl::StrCat("volume_path '", req.volume_path(),
                                            "' is not where volume '", req.volume_id(),
                                            "' is staged or published"));
  }
  if (req.has_volume_capability()) {
    SH_ASSIGN_OR_RETURN(CapabilitySpec cap, ParseCapability(req.volume_capability()));
    if (cap.block != rec.capability.block) {
      return absl::InvalidArgumentError(absl::StrCat(
          "volume '", req.volume_id(), "' was staged as ", rec.capability.block ? "block" : "mount",
          " but the expansion asks for ", cap.block ? "block" : "mount"));
    }
  }
  // The target grows the LUN; we pick the new size up, then grow the filesystem online.
  auto refreshed = deps_.transport.RefreshCapacity(rec.session);
  if (!refreshed.ok()) {
    return Retryable(refreshed.status());
  }
  const uint64_t bytes = *refreshed;
  if (required > 0 && static_cast<int64_t>(bytes) < required) {
    // Not infeasible: the target may grow the LUN a moment later (the kubelet retries).
    return absl::FailedPreconditionError(
        absl::StrCat("the LUN is ", bytes, " bytes but ", required,
                     " are required; grow the LUN on the target (controller expansion) first"));
  }
  if (limit > 0 && static_cast<int64_t>(bytes) > limit) {
    // A LUN never shrinks under a filesystem: this request cannot be met.
    return absl::OutOfRangeError(absl::StrCat("the LUN is ", bytes,
                                              " bytes, more than limit_bytes ", limit,
                                              "; a volume is never shrunk"));
  }
  if (!rec.capability.block) {
    SH_RETURN_IF_ERROR(
        Retryable(WithContext(deps_.grow(rec.Device(), rec.staging_path, rec.capability.fs_type),
                              absl::StrCat("grow the ", rec.capability.fs_type, " filesystem"))));
  }
  rec.capacity_bytes = bytes;
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

grpc::Status NodeService::NodeGetVolumeHealth(grpc::ServerContext*,
                                              const csi::v1::NodeGetVolumeHealthRequest* req,
                                              csi::v1::NodeGetVolumeHealthResponse* resp) {
  return ToGrpcStatus(Health(*req, resp));
}

grpc::Status NodeService::NodeGetStorageHealth(grpc::ServerContext*,
                                               const csi::v1::NodeGetStorageHealthRequest*,
                                               csi::v1::NodeGetStorageHealthResponse* resp) {
  return ToGrpcStatus(StorageHealth(resp));
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
        NodeServiceCapability::RPC::EXPAND_VOLUME, NodeServiceCapability::RPC::GET_VOLUME_HEALTH,
        NodeServiceCapability::RPC::GET_STORAGE_HEALTH}) {
    resp->add_capabilities()->mutable_rpc()->set_type(type);
  }
  return grpc::Status::OK;
}

grpc::Status NodeService::NodeGetInfo(grpc::ServerContext*, const csi::v1::NodeGetInfoRequest*,
                                      csi::v1::NodeGetInfoResponse* resp) {
  resp->set_node_id(options_.node_id);
  NodeRoom room = options_.userspace_default
                      ? ReadUserspaceRoom("/proc", options_.session_memory_bytes)
                      : NodeRoom{};
  room.staged = static_cast<int64_t>(store_.List().size());
  room.configured_max = options_.max_volumes_per_node;
  resp->set_max_volumes_per_node(MaxVolumesPerNode(room));
  return grpc::Status::OK;
}

}  // namespace stagehand::driver

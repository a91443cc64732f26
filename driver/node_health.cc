// The volume and storage health of the built-in driver (CSI v1.13 NodeGetVolumeHealth and
// NodeGetStorageHealth), and the problems NodeGetVolumeStats' condition reports too. Answered
// from the mount table, /proc, sysfs and the session's status file: never I/O to the LUN.

#include <algorithm>
#include <map>
#include <utility>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "driver/node_service.h"
#include "mounter/filesystem_health.h"

namespace stagehand::driver {
namespace {

using csi::v1::StorageHealthErrorType;
using csi::v1::VolumeHealthErrorType;
using Phase = StagedVolume::Phase;

// Problems by (status, reason), in the order first seen, with their messages.
using Kinds = std::vector<std::pair<std::pair<int, std::string>, std::vector<std::string>>>;

VolumeHealthErrorType ToCsi(health::Severity severity) {
  switch (severity) {
    case health::Severity::kDegraded:
      return VolumeHealthErrorType::DEGRADED;
    case health::Severity::kInaccessible:
      return VolumeHealthErrorType::INACCESSIBLE;
    case health::Severity::kDataLoss:
      return VolumeHealthErrorType::DATA_LOSS;
  }
  return VolumeHealthErrorType::UNKNOWN_VOLUME_HEALTH_TYPE;
}

StorageHealthErrorType ToCsi(health::StorageClass storage) {
  return storage == health::StorageClass::kDegraded ? StorageHealthErrorType::STORAGE_DEGRADED
                                                    : StorageHealthErrorType::STORAGE_UNREACHABLE;
}

// One entry per (status, reason), as the spec requires: messages of the same kind are joined.
void AddMerged(Kinds& kinds, int status, const std::string& reason, const std::string& message) {
  for (auto& [kind, messages] : kinds) {
    if (kind.first == status && kind.second == reason) {
      messages.push_back(message);
      return;
    }
  }
  kinds.push_back({{status, reason}, {message}});
}

// Calls `add(status, reason, message)` once per kind, its distinct messages joined.
template <typename Add>
void ForEachKind(Kinds& kinds, const Add& add) {
  for (auto& [kind, messages] : kinds) {
    std::sort(messages.begin(), messages.end());
    messages.erase(std::unique(messages.begin(), messages.end()), messages.end());
    add(kind.first, kind.second, absl::StrJoin(messages, "; "));
  }
}

}  // namespace

std::optional<VolumeProblem> NodeService::SessionProblem(const StagedVolume& volume) const {
  const transport::SessionHealth h = deps_.transport.Health(volume.session);
  if (!h.reason) {
    return std::nullopt;
  }
  return VolumeProblem{*h.reason, h.message};
}

std::vector<VolumeProblem> NodeService::ProblemsAt(const StagedVolume& volume,
                                                   const std::string& path) const {
  std::vector<VolumeProblem> out;
  const CapabilitySpec& cap = volume.capability;
  const bool staging = path == volume.staging_path;
  if (cap.block && staging) {
    return out;  // A block volume's staging path is a directory of ours, not a mount.
  }
  auto mount = deps_.mounter.Find(path);
  if (!mount.ok()) {
    return out;  // The mount table is unreadable: nothing known either way.
  }
  if (!mount->has_value()) {
    out.push_back(
        {staging ? health::Reason::kStagingMountMissing : health::Reason::kPublishMountMissing,
         absl::StrCat("nothing is mounted at '", path,
                      "' (it was unmounted behind stagehand's back); ",
                      staging ? "unpublish and unstage the volume, then stage it again"
                              : "unpublish and publish it again (restart the pod)")});
    return out;
  }
  if (cap.block) {
    return out;
  }
  // The staging mount and every bind of it share one superblock: its options and error counter
  // say whether the filesystem still takes writes (statvfs does not show emergency_ro).
  const bool staged_writable =
      !cap.read_only_mode &&
      std::find(cap.mount_flags.begin(), cap.mount_flags.end(), "ro") == cap.mount_flags.end();
  if (auto failed = mounter::CheckFilesystem(**mount, staged_writable)) {
    out.push_back(
        {failed->failed ? health::Reason::kFilesystemFailed : health::Reason::kFilesystemErrors,
         failed->message});
  }
  return out;
}

absl::Status NodeService::Health(const csi::v1::NodeGetVolumeHealthRequest& req,
                                 csi::v1::NodeGetVolumeHealthResponse* resp) {
  if (req.volume_id().empty()) {
    return absl::InvalidArgumentError("volume_id is required");
  }
  SH_ASSIGN_OR_RETURN(auto existing, store_.Load(req.volume_id()));
  if (!existing.has_value() || existing->phase != Phase::kStaged) {
    return absl::NotFoundError(absl::StrCat("volume '", req.volume_id(), "' is not staged here"));
  }
  const StagedVolume& rec = *existing;
  // The paths asked about, or all of the volume's.
  std::vector<std::string> paths;
  if (!req.staging_target_path().empty()) {
    if (req.staging_target_path() != rec.staging_path) {
      return absl::NotFoundError(absl::StrCat("volume '", req.volume_id(), "' is staged at '",
                                              rec.staging_path, "', not at '",
                                              req.staging_target_path(), "'"));
    }
    paths.push_back(rec.staging_path);
  }
  if (!req.volume_publish_path().empty()) {
    if (rec.FindPublication(req.volume_publish_path()) == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "volume '", req.volume_id(), "' is not published at '", req.volume_publish_path(), "'"));
    }
    paths.push_back(req.volume_publish_path());
  }
  if (paths.empty()) {
    paths.push_back(rec.staging_path);
    for (const Publication& p : rec.publications) {
      paths.push_back(p.target_path);
    }
  }
  Kinds kinds;
  auto add = [&kinds](const VolumeProblem& p) {
    const health::ReasonInfo& info = health::Info(p.reason);
    AddMerged(kinds, ToCsi(info.severity), std::string(info.name), p.message);
  };
  if (auto session = SessionProblem(rec)) {
    add(*session);
  }
  for (const auto& path : paths) {
    for (const auto& p : ProblemsAt(rec, path)) {
      add(p);
    }
  }
  auto* health = resp->mutable_volume_health();
  health->set_volume_id(req.volume_id());
  ForEachKind(kinds, [&](int status, const std::string& reason, std::string message) {
    auto* e = health->add_health_statuses();
    e->set_status(static_cast<VolumeHealthErrorType>(status));
    e->set_reason(reason);
    e->set_message(std::move(message));
  });
  return absl::OkStatus();
}

absl::Status NodeService::StorageHealth(csi::v1::NodeGetStorageHealthResponse* resp) {
  Kinds kinds;
  for (const StagedVolume& volume : store_.List()) {
    if (volume.phase != Phase::kStaged) {
      continue;
    }
    const transport::SessionHealth h = deps_.transport.Health(volume.session);
    std::vector<std::string> portals;
    for (const iscsi::Portal& p : volume.portals) {
      portals.push_back(p.ToString());
    }
    const std::string target =
        absl::StrCat(volume.iqn, " at ", absl::StrJoin(portals, ", "), ": ", h.message);
    if (!h.reason) {
      continue;
    }
    if (const health::StorageClass storage = health::Info(*h.reason).storage;
        storage != health::StorageClass::kNone) {
      AddMerged(kinds, ToCsi(storage), std::string(health::StorageReasonName(storage)), target);
    }
  }
  ForEachKind(kinds, [&](int status, const std::string& reason, std::string message) {
    auto* e = resp->add_backend_health();
    e->set_status(static_cast<StorageHealthErrorType>(status));
    e->set_reason(reason);
    e->set_message(std::move(message));
  });
  return absl::OkStatus();
}

}  // namespace stagehand::driver

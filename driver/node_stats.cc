// NodeService::Stats: NodeGetVolumeStats, usage and the volume condition; and the counts of
// other nodes' reservations met (ReservationTallies).

#include <algorithm>
#include <map>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "driver/csi_validation.h"
#include "driver/node_service.h"
#include "driver/target_path.h"
#include "mounter/volume_stats.h"

namespace stagehand::driver {

using Phase = StagedVolume::Phase;

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
  if (!existing.has_value() || existing->phase != Phase::kStaged) {
    return absl::NotFoundError(absl::StrCat("volume '", req.volume_id(), "' is not staged here"));
  }
  const StagedVolume& rec = *existing;
  const Publication* publish = rec.FindPublication(req.volume_path());
  const bool known = rec.staging_path == req.volume_path() || publish != nullptr;
  const bool readonly_requested =
      rec.capability.read_only_mode || (publish != nullptr && publish->readonly);
  if (!known || !PathExists(req.volume_path())) {
    return absl::NotFoundError(absl::StrCat("volume_path '", req.volume_path(),
                                            "' is not where volume '", req.volume_id(),
                                            "' is staged or published"));
  }
  // The condition: what NodeGetVolumeHealth reports of this path, but a session that has lost
  // some of its paths (still working) is no reason to call the volume abnormal.
  std::vector<std::string> problems;
  if (auto session = SessionProblem(rec);
      session.has_value() &&
      health::Info(session->reason).severity != health::Severity::kDegraded) {
    problems.push_back(session->message);
  }
  bool unmounted = false;
  bool failed = false;
  for (const auto& p : ProblemsAt(rec, req.volume_path())) {
    unmounted = unmounted || p.reason == health::Reason::kStagingMountMissing ||
                p.reason == health::Reason::kPublishMountMissing;
    failed = failed || p.reason == health::Reason::kFilesystemFailed;
    problems.push_back(p.message);
  }
  // Nothing mounted: the usage of whatever filesystem holds the directory would be a lie.
  if (rec.capability.block) {
    auto size = mounter::BlockDeviceSize(rec.Device());
    if (size.ok()) {
      auto* u = resp->add_usage();
      u->set_unit(csi::v1::VolumeUsage::BYTES);
      u->set_total(*size);
    } else {
      problems.push_back(std::string(size.status().message()));
    }
  } else if (!unmounted) {
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
    if (!failed && st->read_only && !readonly_requested) {
      problems.emplace_back(
          "the filesystem is read-only although it was mounted read-write "
          "(I/O errors made the kernel remount it; check the target and dmesg)");
    }
  }
  auto* cond = resp->mutable_volume_condition();
  cond->set_abnormal(!problems.empty());
  cond->set_message(problems.empty() ? "volume is healthy" : absl::StrJoin(problems, "; "));
  return absl::OkStatus();
}

std::vector<ReservationTally> NodeService::ReservationTallies() const {
  std::map<std::string, ReservationTally> by_id;
  for (const StagedVolume& volume : store_.List()) {
    if (IsSingleNode(volume.capability.access_mode)) {
      by_id[volume.volume_id].volume_id = volume.volume_id;
    }
  }
  for (ReservationTally& tally : stager_.ReservationTallies()) {
    by_id[tally.volume_id] = std::move(tally);
  }
  std::vector<ReservationTally> out;
  out.reserve(by_id.size());
  for (auto& [id, tally] : by_id) {
    out.push_back(std::move(tally));
  }
  return out;
}

}  // namespace stagehand::driver

#include "driver/volume_health.h"

#include <absl/strings/str_cat.h>

namespace stagehand::driver {

absl::Status VolumeHealth::CheckStagingLive(const StagedVolume& volume) const {
  if (volume.phase != StagedVolume::Phase::kStaged) {
    return absl::FailedPreconditionError("its stage did not complete");
  }
  const transport::SessionHealth health = transport_.Health(volume.session);
  // Some problems leave the staging standing (a successor taking over the same device).
  if (!health.Usable() && !health::Info(*health.reason).staging_stands) {
    return absl::FailedPreconditionError(health.message);
  }
  if (volume.capability.block) {
    return absl::OkStatus();
  }
  SH_ASSIGN_OR_RETURN(auto m, mounter_.Find(volume.staging_path));
  if (!m.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("nothing is mounted at '", volume.staging_path,
                     "' (the node rebooted or the mount was removed)"));
  }
  if (m->source != volume.Device()) {
    return absl::FailedPreconditionError(absl::StrCat("'", volume.staging_path,
                                                      "' holds a mount of '", m->source,
                                                      "', not of this volume's device"));
  }
  return absl::OkStatus();
}

std::vector<std::string> VolumeHealth::StillPublished(const StagedVolume& volume) const {
  std::vector<std::string> still;
  for (const Publication& p : volume.publications) {
    auto m = mounter_.Find(p.target_path);
    if (!m.ok() || m->has_value()) {  // Unreadable mount state counts as mounted.
      still.push_back(p.target_path);
    }
  }
  return still;
}

}  // namespace stagehand::driver

#include "driver/volume_health.h"

#include <absl/strings/str_cat.h>

namespace stagehand::driver {

using state::v1::VolumeRecord;

absl::Status VolumeHealth::CheckStagingLive(const VolumeRecord& record) const {
  if (record.phase() != VolumeRecord::STAGED) {
    return absl::FailedPreconditionError("its stage did not complete");
  }
  const iscsi::SessionHealth health = transport_.Health(record.session());
  if (!health.healthy) {
    return absl::FailedPreconditionError(health.message);
  }
  if (record.block()) {
    return absl::OkStatus();
  }
  SH_ASSIGN_OR_RETURN(auto m, mounter_.Find(record.staging_path()));
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

std::vector<std::string> VolumeHealth::StillPublished(const VolumeRecord& record) const {
  std::vector<std::string> still;
  for (const auto& p : record.publishes()) {
    auto m = mounter_.Find(p.target_path());
    if (!m.ok() || m->has_value()) {  // Unreadable mount state counts as mounted.
      still.push_back(p.target_path());
    }
  }
  return still;
}

}  // namespace stagehand::driver

#include "reconciler/reconstruction.h"

#include <algorithm>

namespace stagehand::reconciler {

std::vector<std::string> MarkMissingMounts(ActualVolume& volume,
                                           const std::set<std::string>& mounted) {
  std::vector<std::string> gone;
  if (volume.stage == StageState::kStaged && !volume.capability.block &&
      !mounted.contains(volume.staging_path)) {
    volume.stage = StageState::kUncertain;
    gone.push_back(volume.staging_path);
  }
  for (auto& t : volume.targets) {
    if (t.state == PublishState::kPublished && !mounted.contains(t.target_path)) {
      t.state = PublishState::kUncertain;
      gone.push_back(t.target_path);
    }
  }
  return gone;
}

absl::StatusOr<Reconstruction> Reconstruct(ActualStore& store, MountTable& mounts) {
  Reconstruction r;
  r.volumes = store.List(r.errors);
  auto mounted = mounts.MountPoints();
  if (!mounted.ok()) {
    return WithContext(mounted.status(), "reading the mount table for reconstruction");
  }
  for (auto& record : r.volumes) {
    const std::vector<std::string> gone = MarkMissingMounts(record, *mounted);
    const bool target_lost = std::any_of(gone.begin(), gone.end(), [&](const std::string& path) {
      return path != record.staging_path;
    });
    bool intact = record.stage == StageState::kStaged;
    for (const auto& t : record.targets) {
      intact = intact && t.state == PublishState::kPublished;
    }
    // A lost publish of a block volume (a reboot) means its device may be gone or reused, so
    // the stage is not certain either.
    if (record.capability.block && target_lost && record.stage == StageState::kStaged) {
      record.stage = StageState::kUncertain;
      intact = false;
    }
    intact ? ++r.intact : ++r.repair;
  }
  return r;
}

}  // namespace stagehand::reconciler

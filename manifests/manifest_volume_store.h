#pragma once

// The reconciler's seams on the real host: its records as JSON files under
// <state-dir>/volumes/<name>/volume.json (0600, replaced atomically) with a kubelet-style
// vol_data.json beside each staging path, and the mount table read through the Mounter.

#include <string>

#include "mounter/mounter.h"
#include "reconciler/actual_state.h"

namespace stagehand::manifests {

class ManifestVolumeStore final : public reconciler::ActualStore {
 public:
  explicit ManifestVolumeStore(std::string state_dir) : state_dir_(std::move(state_dir)) {}

  std::vector<reconciler::ActualVolume> List(std::vector<std::string>& errors) override;
  absl::Status Save(const reconciler::ActualVolume& volume) override;
  // Removes the record, vol_data.json and the (empty) staging directories.
  absl::Status Remove(const reconciler::ActualVolume& volume) override;

  std::string RecordPath(const std::string& name) const;

 private:
  std::string state_dir_;
};

class HostMountTable final : public reconciler::MountTable {
 public:
  explicit HostMountTable(const mounter::Mounter& mounter) : mounter_(mounter) {}

  absl::StatusOr<std::set<std::string>> MountPoints() override;

 private:
  const mounter::Mounter& mounter_;
};

}  // namespace stagehand::manifests

#include "driver/staged_volume.h"

#include <absl/strings/str_cat.h>

namespace stagehand::driver {

const Publication* StagedVolume::FindPublication(const std::string& target_path) const {
  for (const Publication& p : publications) {
    if (p.target_path == target_path) {
      return &p;
    }
  }
  return nullptr;
}

std::string DescribeStage(const StagedVolume& volume) {
  switch (volume.phase) {
    case StagedVolume::Phase::kStaged:
      return absl::StrCat("staged at '", volume.staging_path, "'");
    case StagedVolume::Phase::kUnstaging:
      return absl::StrCat("being unstaged from '", volume.staging_path, "'");
    case StagedVolume::Phase::kStaging:
      break;
  }
  return absl::StrCat("half staged at '", volume.staging_path, "'");
}

}  // namespace stagehand::driver

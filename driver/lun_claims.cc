#include "driver/lun_claims.h"

#include <absl/strings/str_cat.h>

#include "iscsi/session_conversions.h"
#include "iscsi/target_spec.h"

namespace stagehand::driver {

using state::v1::VolumeRecord;

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

std::optional<VolumeRecord> FindVolumeOnLun(const std::vector<VolumeRecord>& records,
                                            const VolumeRecord& record,
                                            const iscsi::LunIdentity* identity) {
  for (const VolumeRecord& other : records) {
    if (other.volume_id() == record.volume_id()) {
      continue;
    }
    if (identity != nullptr) {
      const iscsi::LunIdentity theirs = iscsi::FromProto(other.identity());
      if (!identity->Empty() && !theirs.Empty() && iscsi::CheckSameLun(theirs, *identity).ok()) {
        return other;
      }
      continue;
    }
    if (other.iqn() != record.iqn() || other.lun() != record.lun()) {
      continue;
    }
    for (const auto& mine : record.portals()) {
      for (const auto& theirs : other.portals()) {
        if (mine.port() == theirs.port() && iscsi::SameAddress(mine.host(), theirs.host())) {
          return other;
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace stagehand::driver

#include "driver/lun_claims.h"

#include "iscsi/target_spec.h"

namespace stagehand::driver {

std::optional<StagedVolume> FindVolumeOnLun(const std::vector<StagedVolume>& volumes,
                                            const StagedVolume& volume,
                                            const iscsi::LunIdentity* identity) {
  for (const StagedVolume& other : volumes) {
    if (other.volume_id == volume.volume_id) {
      continue;
    }
    if (identity != nullptr) {
      if (!identity->Empty() && !other.identity.Empty() &&
          iscsi::CheckSameLun(other.identity, *identity).ok()) {
        return other;
      }
      continue;
    }
    if (other.iqn != volume.iqn || other.lun != volume.lun) {
      continue;
    }
    for (const iscsi::Portal& mine : volume.portals) {
      for (const iscsi::Portal& theirs : other.portals) {
        if (mine.port == theirs.port && iscsi::SameAddress(mine.host, theirs.host)) {
          return other;
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace stagehand::driver

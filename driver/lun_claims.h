#pragma once

// One LUN backs one volume: two volumes on one LUN would mount one filesystem twice and corrupt
// it. Which recorded volume already holds the LUN a stage is about to use. Pure.

#include <optional>
#include <vector>

#include "driver/staged_volume.h"
#include "iscsi/lun_identity.h"

namespace stagehand::driver {

// The volume among `volumes`, other than `volume` itself, that holds the LUN `volume` is about
// to use. With `identity` null (before the LUN was read): the same target IQN and LUN number
// through a common portal (same port, same address however written). Else: the same LUN
// identity (WWN or serial); a volume without an identity matches none.
std::optional<StagedVolume> FindVolumeOnLun(const std::vector<StagedVolume>& volumes,
                                            const StagedVolume& volume,
                                            const iscsi::LunIdentity* identity);

}  // namespace stagehand::driver

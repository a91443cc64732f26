#pragma once

// One LUN backs one volume: two volumes on one LUN would mount one filesystem twice and corrupt
// it. Which recorded volume already holds the LUN a stage is about to use. Pure.

#include <optional>
#include <string>
#include <vector>

#include "iscsi/lun_identity.h"
#include "proto/state.pb.h"

namespace stagehand::driver {

// "staged at '/p'", "half staged at '/p'" (a stage cut short), "being unstaged from '/p'".
std::string DescribeRecord(const state::v1::VolumeRecord& r);

// The volume among `records`, other than `record`'s own, that holds the LUN `record` is about to
// use. With `identity` null (before the LUN was read): the same target IQN and LUN number
// through a common portal (same port, same address however written). Else: the same LUN
// identity (WWN or serial); a record without an identity matches none.
std::optional<state::v1::VolumeRecord> FindVolumeOnLun(
    const std::vector<state::v1::VolumeRecord>& records, const state::v1::VolumeRecord& record,
    const iscsi::LunIdentity* identity);

}  // namespace stagehand::driver

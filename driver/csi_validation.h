#pragma once

// Validation of CSI Node requests: pure functions from proto fields to domain values, each
// failure an InvalidArgument that says what to fix.

#include <string>
#include <vector>

#include "base/status.h"
#include "driver/staged_volume.h"
#include "proto/csi.pb.h"

namespace stagehand::driver {

// Checks a path field: present, absolute, normalised (no "." or ".." components, no "//", no
// trailing '/'). `field` names it in the message ("target_path").
absl::Status ValidatePathField(const std::string& path, std::string_view field);

// Checks that `path` does not lie inside one of `reserved` directories (stagehand's own state).
absl::Status CheckNotReserved(const std::string& path, std::string_view field,
                              const std::vector<std::string>& reserved);

// Parses a VolumeCapability. Mount: fs_type "" (ext4), "ext4" or "xfs"; mount flags must not
// contain ',' and must not be "bind", "rbind", "remount" or "move". Access modes: single-node
// modes and MULTI_NODE_READER_ONLY for both; multi-node writers only for block volumes.
absl::StatusOr<CapabilitySpec> ParseCapability(const csi::v1::VolumeCapability& capability);

// SINGLE_NODE_READER_ONLY or MULTI_NODE_READER_ONLY.
bool IsReaderOnly(csi::v1::VolumeCapability::AccessMode::Mode mode);

}  // namespace stagehand::driver

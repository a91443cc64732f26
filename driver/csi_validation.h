#pragma once

// Validation of CSI Node requests: pure functions from proto fields to domain values, each
// failure an InvalidArgument that says what to fix.

#include <string>
#include <vector>

#include "base/status.h"
#include "proto/csi.pb.h"
#include "proto/state.pb.h"

namespace stagehand::driver {

struct CapabilitySpec {
  bool block = false;
  std::string fs_type;  // "ext4" or "xfs" for mount; empty for block.
  std::vector<std::string> mount_flags;
  csi::v1::VolumeCapability::AccessMode::Mode access_mode =
      csi::v1::VolumeCapability::AccessMode::UNKNOWN;
  bool read_only_mode = false;  // The access mode only allows reading.

  bool operator==(const CapabilitySpec&) const = default;
};

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

// The access mode a volume was staged with, persisted in its record by its CSI name (so that a
// reordered enum never changes what a record means); UNKNOWN when the record has none or a name
// this build does not know.
csi::v1::VolumeCapability::AccessMode::Mode RecordedAccessMode(
    const state::v1::VolumeRecord& record);

}  // namespace stagehand::driver

#pragma once

// Validation of CSI Node requests: pure functions from proto fields to domain values, each
// failure an InvalidArgument that says what to fix.

#include <string>
#include <vector>

#include "base/status.h"
#include "driver/staged_volume.h"
#include "proto/csi.pb.h"

namespace stagehand::driver {

// The CSI spec's size limits (its "Size Limits" table): 128 bytes for a string, 4 KiB for a map;
// paths override it (at least 128 bytes; here what the kernel takes).
inline constexpr size_t kMaxStringBytes = 128;
inline constexpr size_t kMaxMapBytes = 4096;
inline constexpr size_t kMaxPathBytes = 4095;

// Checks a volume_id: present, at most kMaxStringBytes.
absl::Status ValidateVolumeId(const std::string& volume_id);

// Checks a map field (volume_context, publish_context, secrets): keys of at most
// kMaxStringBytes, keys and values of at most kMaxMapBytes together. `secret`: the message names
// no key or value.
absl::Status ValidateStringMap(const google::protobuf::Map<std::string, std::string>& map,
                               std::string_view field, bool secret = false);

// Checks a path field: present, absolute, normalised (no "." or ".." components, no "//", no
// trailing '/'), at most kMaxPathBytes. `field` names it in the message ("target_path").
absl::Status ValidatePathField(const std::string& path, std::string_view field);

// Checks that `path` does not lie inside one of `reserved` directories (stagehand's own state).
absl::Status CheckNotReserved(const std::string& path, std::string_view field,
                              const std::vector<std::string>& reserved);

// Parses a VolumeCapability. Mount: fs_type "" (ext4), "ext4" or "xfs"; mount flags must not
// contain ',' and must not be "bind", "rbind", "remount" or "move", kMaxMapBytes in all. Access
// modes: single-node modes and MULTI_NODE_READER_ONLY for both; multi-node writers only for block
// volumes.
absl::StatusOr<CapabilitySpec> ParseCapability(const csi::v1::VolumeCapability& capability);

// SINGLE_NODE_READER_ONLY or MULTI_NODE_READER_ONLY.
bool IsReaderOnly(csi::v1::VolumeCapability::AccessMode::Mode mode);

// A single-node mode (SINGLE_NODE_*): the LUN is reserved for the node that stages it.
bool IsSingleNode(csi::v1::VolumeCapability::AccessMode::Mode mode);

}  // namespace stagehand::driver

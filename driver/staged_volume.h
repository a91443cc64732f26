#pragma once

// A volume of the built-in driver, as its code reads and changes it. Plain values: the volume
// store (volume_store.h) is the only place that converts it to and from the persisted protobuf
// record.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "iscsi/lun_identity.h"
#include "iscsi/target_spec.h"
#include "proto/csi.pb.h"
#include "proto/state.pb.h"
#include "transport/session_record.h"

namespace stagehand::driver {

// What a VolumeCapability asks for, validated (ParseCapability in csi_validation.h).
struct CapabilitySpec {
  bool block = false;
  std::string fs_type;  // "ext4" or "xfs" for mount; empty for block.
  std::vector<std::string> mount_flags;
  csi::v1::VolumeCapability::AccessMode::Mode access_mode =
      csi::v1::VolumeCapability::AccessMode::UNKNOWN;
  bool read_only_mode = false;  // The access mode only allows reading.

  bool operator==(const CapabilitySpec&) const = default;
};

// A bind mount of a staged volume into a consumer's target path.
struct Publication {
  std::string target_path;
  bool readonly = false;
  std::vector<std::string> mount_flags;
};

struct StagedVolume {
  enum class Phase {
    kStaging,    // Persisted before any side effect: a stage in progress, or one cut short.
    kStaged,     // Complete.
    kUnstaging,  // A teardown in progress, or one cut short.
  };

  std::string volume_id;
  std::string staging_path;
  Phase phase = Phase::kStaging;
  // As staged. The access mode is persisted by its CSI name; a record without one (or with a
  // name this build does not know) reads as UNKNOWN.
  CapabilitySpec capability;
  std::map<std::string, std::string> volume_context;  // Non-secret; compared on repeated stages.
  // The target as the volume context named it.
  std::vector<iscsi::Portal> portals;
  std::string iqn;
  uint32_t lun = 0;
  // The LUN this volume claims: read from the LUN and vetted before it was exposed. A re-stage
  // must find this very LUN again; no other volume may stage it. Empty until it was read.
  iscsi::LunIdentity identity;
  uint64_t capacity_bytes = 0;
  bool formatted_by_us = false;  // This driver ran mkfs on the LUN.
  // Its XFS is mounted with nouuid: another mounted XFS had the same UUID (a clone).
  bool xfs_nouuid = false;
  std::vector<Publication> publications;
  // The transport's own record of the attachment (session process or kernel sessions, loop
  // device or disks): opaque here, handed back to the transport to check and detach it.
  state::v1::SessionRecord session;

  // The block device the volume is staged on; empty before the attach.
  const std::string& Device() const { return transport::DeviceOf(session); }

  // The publish at `target_path`, or null.
  const Publication* FindPublication(const std::string& target_path) const;
};

// "staged at '/p'", "half staged at '/p'" (a stage cut short), "being unstaged from '/p'".
std::string DescribeStage(const StagedVolume& volume);

// A format this driver started on a LUN and has not seen finish (volume_stager.h).
struct FormatIntent {
  std::string volume_id;
  iscsi::LunIdentity identity;  // The LUN being formatted.
  std::string fs_type;
};

}  // namespace stagehand::driver

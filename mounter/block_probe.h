#pragma once

// The block-probe seam: what does a device hold? The answer decides whether we may format it.
// The real implementation is `BlkidBlockProbe`; tests use a fake.

#include <string>

#include "base/status.h"

namespace stagehand::mounter {

struct ProbeResult {
  enum class Kind {
    kBlank,           // No signature of any kind and the leading bytes are all zero.
    kFilesystem,      // A filesystem superblock (`type` is "ext4", "xfs", "vfat", …).
    kPartitionTable,  // A partition table (`type` is "dos", "gpt", …).
    kOtherSignature,  // RAID/LVM member, LUKS, swap, … or "ambivalent" (several signatures).
    kNotZeroed,       // No known signature, but the leading bytes are not all zero.
  };
  Kind kind = Kind::kBlank;
  std::string type;  // Empty for kBlank and kNotZeroed.
  std::string uuid;  // Filesystem UUID, if the signature has one.
};

// Looks at the signatures on a device.
// Thread-compatible; implementations never log above debug.
class BlockProbe {
 public:
  virtual ~BlockProbe() = default;

  // Probes `device` (a block device or a regular file). A probe error is an error, never "blank":
  // kBlank is returned only when no superblock (including RAID and LVM members) and no partition
  // table is found AND the first 2 MiB (or the whole device if smaller) read back as zeros from
  // the device itself, bypassing the page cache. No signature but non-zero data is kNotZeroed.
  // NotFound: `device` does not exist. InvalidArgument: it is neither a block device nor a file.
  virtual absl::StatusOr<ProbeResult> Probe(const std::string& device) = 0;
};

}  // namespace stagehand::mounter

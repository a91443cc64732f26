#pragma once

// `BlockProbe` backed by libblkid plus a direct read of the leading bytes.

#include <string>

#include "base/status.h"
#include "mounter/block_probe.h"

namespace stagehand::mounter {

// Probes superblocks (filesystems, RAID/LVM members, LUKS, swap) and partition tables with
// libblkid's safe probe, then, if nothing was found, checks that the first 2 MiB are zero.
// Flushes the block device's buffer cache first (BLKFLSBUF), so another writer's data is seen;
// that and the O_DIRECT read need CAP_SYS_ADMIN for block devices. Stateless, thread-safe.
class BlkidBlockProbe : public BlockProbe {
 public:
  absl::StatusOr<ProbeResult> Probe(const std::string& device) override;
};

}  // namespace stagehand::mounter

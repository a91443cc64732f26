#pragma once

// The pure rule that decides whether a device may be formatted. Never format data away.

#include <string_view>

#include "base/status.h"
#include "mounter/block_probe.h"

namespace stagehand::mounter {

enum class FormatAction {
  kFormat,       // The device is blank: create the requested filesystem.
  kUseExisting,  // The device already holds the requested filesystem: mount it as is.
};

// Decides what to do with a device that `probe` describes, given the filesystem the volume asks
// for (`requested_fs`: "ext4" or "xfs").
// kBlank -> kFormat. kFilesystem of `requested_fs` -> kUseExisting.
// FailedPrecondition: a filesystem of another type, a partition table, another signature or
// non-zero data without a signature; the message names what was found.
// InvalidArgument: `requested_fs` is not supported.
absl::StatusOr<FormatAction> DecideFormat(const ProbeResult& probe, std::string_view requested_fs);

}  // namespace stagehand::mounter

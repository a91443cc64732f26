#pragma once

// CSI's VolumeCapability from the plain one the reconciler and stagehandctl hold, and the CSI
// names of access modes.

#include <string_view>

#include "base/status.h"
#include "proto/csi.pb.h"
#include "reconciler/volume_spec.h"

namespace stagehand::csiclient {

void FillCapability(const reconciler::Capability& cap, csi::v1::VolumeCapability* out);

csi::v1::VolumeCapability::AccessMode::Mode ToCsi(reconciler::AccessMode mode);

// "SINGLE_NODE_WRITER", "MULTI_NODE_READER_ONLY", ...: InvalidArgument naming the modes for
// anything else.
absl::StatusOr<reconciler::AccessMode> AccessModeNamed(std::string_view csi_name);

}  // namespace stagehand::csiclient

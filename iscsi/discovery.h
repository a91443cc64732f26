#pragma once

// SendTargets discovery with libiscsi from this process (no iscsid).

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "iscsi/target_spec.h"

namespace stagehand::iscsi {

struct DiscoveredTarget {
  std::string name;
  std::vector<std::string> portals;  // As the target reports them: "ip:port,tpgt".
};

// Logs in to `portal` as a discovery session (CHAP when `chap` is set), asks SendTargets=All and
// logs out. Each step is bounded by `timeout_seconds`. Errors as MapLibiscsiError maps them.
absl::StatusOr<std::vector<DiscoveredTarget>> Discover(const Portal& portal,
                                                       const std::string& initiator_name,
                                                       const std::optional<ChapCredentials>& chap,
                                                       int timeout_seconds);

}  // namespace stagehand::iscsi

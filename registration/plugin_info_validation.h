#pragma once

// Validation of what a plugin's registration socket answers to GetInfo, as the kubelet's plugin
// manager does it for CSI plugins: type "CSIPlugin", a non-empty name, at least one supported
// version with major version 1, and an endpoint that is an absolute unix socket path.

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "proto/pluginregistration.pb.h"

namespace stagehand::registration {

inline constexpr std::string_view kCsiPluginType = "CSIPlugin";

struct CsiVersion {
  int major = 0;
  int minor = 0;
  int patch = 0;

  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 misreads a defaulted <=>.
  auto operator<=>(const CsiVersion&) const = default;
};

// Parses "1", "1.2", "1.2.3" and the same with a leading "v". InvalidArgument otherwise.
absl::StatusOr<CsiVersion> ParseCsiVersion(std::string_view text);

// The highest version in `versions` with major version 1, as written by the plugin.
// InvalidArgument naming the offered versions when there is none.
absl::StatusOr<std::string> HighestSupportedVersion(const std::vector<std::string>& versions);

// "/abs/path" or "unix:///abs/path" -> "/abs/path". InvalidArgument when not a clean absolute
// path or longer than a unix socket path can be.
absl::StatusOr<std::string> EndpointSocketPath(std::string_view endpoint);

// Everything above, for one GetInfo answer. The message says what the plugin must change.
absl::Status ValidatePluginInfo(const pluginregistration::PluginInfo& info);

}  // namespace stagehand::registration

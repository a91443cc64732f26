#include "registration/plugin_info_validation.h"

#include <charconv>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "base/paths.h"

namespace stagehand::registration {
namespace {

constexpr size_t kMaxUnixSocketPath = 107;

bool ParseNumber(std::string_view text, int& out) {
  if (text.empty() || text.size() > 6 || text[0] < '0' || text[0] > '9') {
    return false;
  }
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end;
}

}  // namespace

absl::StatusOr<CsiVersion> ParseCsiVersion(std::string_view text) {
  std::string_view rest = text;
  if (rest.starts_with('v')) {
    rest.remove_prefix(1);
  }
  CsiVersion version;
  int* parts[] = {&version.major, &version.minor, &version.patch};
  size_t index = 0;
  while (true) {
    const size_t dot = rest.find('.');
    const std::string_view piece = rest.substr(0, dot);
    if (index >= 3 || !ParseNumber(piece, *parts[index])) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", ToAbsl(text), "' is not a version like 1.0.0"));
    }
    ++index;
    if (dot == std::string_view::npos) {
      break;
    }
    rest.remove_prefix(dot + 1);
  }
  return version;
}

absl::StatusOr<std::string> HighestSupportedVersion(const std::vector<std::string>& versions) {
  const std::string* best = nullptr;
  CsiVersion best_version;
  for (const auto& text : versions) {
    auto parsed = ParseCsiVersion(text);
    if (!parsed.ok() || parsed->major != 1) {
      continue;
    }
    if (best == nullptr || *parsed > best_version) {
      best = &text;
      best_version = *parsed;
    }
  }
  if (best == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("none of the supported versions [", absl::StrJoin(versions, ", "),
                     "] is a CSI 1.x version; the plugin must offer one such as 1.0.0"));
  }
  return *best;
}

absl::StatusOr<std::string> EndpointSocketPath(std::string_view endpoint) {
  std::string_view path = endpoint;
  if (path.starts_with("unix://")) {
    path.remove_prefix(7);
  } else if (path.starts_with("unix:")) {
    path.remove_prefix(5);
  }
  if (path.empty()) {
    return absl::InvalidArgumentError("the endpoint is empty; it must be the CSI socket's path");
  }
  if (!IsCleanAbsolutePath(std::string(path))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "endpoint '", ToAbsl(endpoint), "' must be an absolute, normalised unix socket path"));
  }
  if (path.size() > kMaxUnixSocketPath) {
    return absl::InvalidArgumentError(absl::StrCat("endpoint '", ToAbsl(endpoint),
                                                   "' is longer than ", kMaxUnixSocketPath,
                                                   " bytes, the limit of a unix socket path"));
  }
  return std::string(path);
}

absl::Status ValidatePluginInfo(const pluginregistration::PluginInfo& info) {
  if (info.type() != kCsiPluginType) {
    return absl::InvalidArgumentError(absl::StrCat("plugin type '", info.type(),
                                                   "' is not supported; only '",
                                                   ToAbsl(kCsiPluginType), "' is"));
  }
  if (info.name().empty()) {
    return absl::InvalidArgumentError("the plugin name is empty; GetInfo must name the driver");
  }
  const std::vector<std::string> versions(info.supported_versions().begin(),
                                          info.supported_versions().end());
  SH_RETURN_IF_ERROR(HighestSupportedVersion(versions).status());
  return EndpointSocketPath(info.endpoint()).status();
}

}  // namespace stagehand::registration

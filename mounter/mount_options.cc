#include "mounter/mount_options.h"

#include <sys/mount.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <array>
#include <utility>

#include <absl/strings/escaping.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>

namespace stagehand::mounter {
namespace {

constexpr std::array<std::pair<std::string_view, uint64_t>, 8> kBindFlags = {{
    {"ro", MS_RDONLY},
    {"nosuid", MS_NOSUID},
    {"nodev", MS_NODEV},
    {"noexec", MS_NOEXEC},
    {"noatime", MS_NOATIME},
    {"nodiratime", MS_NODIRATIME},
    {"relatime", MS_RELATIME},
    {"strictatime", MS_STRICTATIME},
}};

}  // namespace

bool IsQuotedContextOption(std::string_view option) {
  constexpr std::string_view kPrefix = "context=\"";
  if (!option.starts_with(kPrefix) || option.size() < kPrefix.size() + 2 ||
      !option.ends_with('"')) {
    return false;
  }
  const std::string_view value = option.substr(kPrefix.size(), option.size() - kPrefix.size() - 1);
  return std::ranges::none_of(value, [](char c) { return c == '"'; });
}

std::string SelinuxContext(const std::vector<std::string>& options) {
  constexpr std::string_view kPrefix = "context=";
  for (const std::string& o : options) {
    if (!o.starts_with(kPrefix)) {
      continue;
    }
    std::string_view value = std::string_view(o).substr(kPrefix.size());
    if (IsQuotedContextOption(o)) {
      value = value.substr(1, value.size() - 2);
    }
    return std::string(value);
  }
  return "";
}

absl::Status CheckMountOption(std::string_view option) {
  const bool control = std::any_of(option.begin(), option.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\';
  });
  const bool separators =
      option.find_first_of(",\"") != std::string_view::npos && !IsQuotedContextOption(option);
  if (option.empty() || control || separators) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed mount option '",
        absl::CHexEscape(absl::string_view(option.data(), option.size())),
        "': one option per entry, no control characters or backslashes, and a comma or a quote "
        "only in a quoted context=\"...\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> JoinMountOptions(const std::vector<std::string>& options) {
  for (const std::string& o : options) {
    SH_RETURN_IF_ERROR(CheckMountOption(o));
  }
  return absl::StrJoin(options, ",");
}

absl::StatusOr<uint64_t> BindRemountFlags(bool readonly, const std::vector<std::string>& options) {
  uint64_t flags = readonly ? MS_RDONLY : 0;
  for (const std::string& o : options) {
    bool known = false;
    for (const auto& [name, flag] : kBindFlags) {
      if (o == name) {
        flags |= flag;
        known = true;
        break;
      }
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat("unsupported bind mount option '", o, "'"));
    }
  }
  return flags;
}

uint64_t InheritedBindFlags(uint64_t statvfs_flags, uint64_t requested) {
  // ST_RELATIME != MS_RELATIME, so map every flag explicitly.
  constexpr std::array<std::pair<uint64_t, uint64_t>, 4> kRestrictions = {{
      {ST_RDONLY, MS_RDONLY},
      {ST_NOSUID, MS_NOSUID},
      {ST_NODEV, MS_NODEV},
      {ST_NOEXEC, MS_NOEXEC},
  }};
  constexpr std::array<std::pair<uint64_t, uint64_t>, 3> kAtime = {{
      {ST_NOATIME, MS_NOATIME},
      {ST_NODIRATIME, MS_NODIRATIME},
      {ST_RELATIME, MS_RELATIME},
  }};
  constexpr uint64_t kAtimeMask = MS_NOATIME | MS_NODIRATIME | MS_RELATIME | MS_STRICTATIME;
  uint64_t inherited = 0;
  for (const auto& [st, ms] : kRestrictions) {
    if ((statvfs_flags & st) != 0) {
      inherited |= ms;
    }
  }
  if ((requested & kAtimeMask) == 0) {
    for (const auto& [st, ms] : kAtime) {
      if ((statvfs_flags & st) != 0) {
        inherited |= ms;
      }
    }
  }
  return inherited;
}

bool HasMountOption(std::string_view option_list, std::string_view option) {
  for (absl::string_view entry : absl::StrSplit(ToAbsl(option_list), ',')) {
    if (ToStd(entry) == option) {
      return true;
    }
  }
  return false;
}

}  // namespace stagehand::mounter

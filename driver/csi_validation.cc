#include "driver/csi_validation.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include "base/paths.h"
#include "mounter/mount_options.h"

namespace stagehand::driver {

using AccessMode = csi::v1::VolumeCapability::AccessMode;

absl::Status ValidateVolumeId(const std::string& volume_id) {
  if (volume_id.empty()) {
    return absl::InvalidArgumentError("volume_id is required");
  }
  if (volume_id.size() > kMaxStringBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "volume_id is ", volume_id.size(), " bytes long; CSI allows at most ", kMaxStringBytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateStringMap(const google::protobuf::Map<std::string, std::string>& map,
                               std::string_view field, bool secret) {
  size_t total = 0;
  for (const auto& [key, value] : map) {
    if (key.size() > kMaxStringBytes) {
      return absl::InvalidArgumentError(
          secret ? absl::StrCat(ToAbsl(field), " has a key longer than ", kMaxStringBytes, " bytes")
                 : absl::StrCat(ToAbsl(field), " key '", key.substr(0, 32), "...' is ", key.size(),
                                " bytes long; CSI allows at most ", kMaxStringBytes));
    }
    total += key.size() + value.size();
  }
  if (total > kMaxMapBytes) {
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(field), " holds ", total,
                                                   " bytes of keys and values; CSI allows at most ",
                                                   kMaxMapBytes));
  }
  return absl::OkStatus();
}

absl::Status ValidatePathField(const std::string& path, std::string_view field) {
  if (path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(field), " is required"));
  }
  if (path.size() > kMaxPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        ToAbsl(field), " is ", path.size(), " bytes long; paths may have at most ", kMaxPathBytes));
  }
  if (!IsCleanAbsolutePath(path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        ToAbsl(field), " '", path,
        "' must be an absolute, normalised path (no '.', '..', '//' or trailing '/')"));
  }
  return absl::OkStatus();
}

absl::Status CheckNotReserved(const std::string& path, std::string_view field,
                              const std::vector<std::string>& reserved) {
  for (const auto& dir : reserved) {
    if (!dir.empty() && (IsPathWithin(path, dir) || IsPathWithin(dir, path))) {
      return absl::InvalidArgumentError(absl::StrCat(ToAbsl(field), " '", path,
                                                     "' overlaps stagehand's own directory '", dir,
                                                     "'; choose a path outside it"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CapabilitySpec> ParseCapability(const csi::v1::VolumeCapability& capability) {
  CapabilitySpec spec;
  if (capability.has_block()) {
    spec.block = true;
  } else if (capability.has_mount()) {
    const auto& mount = capability.mount();
    spec.fs_type = mount.fs_type().empty() ? "ext4" : mount.fs_type();
    if (spec.fs_type != "ext4" && spec.fs_type != "xfs") {
      return absl::InvalidArgumentError(absl::StrCat("volume_capability.mount.fs_type '",
                                                     mount.fs_type(),
                                                     "' is not supported; use ext4 or xfs"));
    }
    int contexts = 0;
    size_t flag_bytes = 0;
    for (const auto& flag : mount.mount_flags()) {
      flag_bytes += flag.size();
      if (flag_bytes > kMaxMapBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "volume_capability.mount.mount_flags hold more than ", kMaxMapBytes, " bytes"));
      }
      // A quoted SELinux context keeps its commas (the kubelet's `context="...:s0:c1,c2"`).
      SH_RETURN_IF_ERROR(mounter::CheckMountOption(flag));
      if (flag == "bind" || flag == "rbind" || flag == "remount" || flag == "move") {
        return absl::InvalidArgumentError(
            absl::StrCat("mount flag '", flag, "' is not allowed: no bind/remount/move"));
      }
      if (flag.starts_with("context=") && ++contexts > 1) {
        return absl::InvalidArgumentError(
            "more than one context= mount flag: a filesystem is mounted with one SELinux context");
      }
      spec.mount_flags.push_back(flag);
    }
    if (!mount.volume_mount_group().empty()) {
      return absl::InvalidArgumentError(
          "volume_mount_group is not supported by this driver (no VOLUME_MOUNT_GROUP capability)");
    }
  } else {
    return absl::InvalidArgumentError("volume_capability needs an access type: mount or block");
  }
  if (!capability.has_access_mode()) {
    return absl::InvalidArgumentError("volume_capability.access_mode is required");
  }
  spec.access_mode = capability.access_mode().mode();
  switch (spec.access_mode) {
    case AccessMode::SINGLE_NODE_WRITER:
    case AccessMode::SINGLE_NODE_SINGLE_WRITER:
    case AccessMode::SINGLE_NODE_MULTI_WRITER:
      break;
    case AccessMode::SINGLE_NODE_READER_ONLY:
    case AccessMode::MULTI_NODE_READER_ONLY:
      spec.read_only_mode = true;
      break;
    case AccessMode::MULTI_NODE_SINGLE_WRITER:
    case AccessMode::MULTI_NODE_MULTI_WRITER:
      if (!spec.block) {
        return absl::InvalidArgumentError(absl::StrCat(
            "access mode ", AccessMode::Mode_Name(spec.access_mode),
            " needs a cluster filesystem; ext4 and xfs would be corrupted. Use block access or a "
            "single-node mode"));
      }
      break;
    default:
      return absl::InvalidArgumentError("volume_capability.access_mode is unknown");
  }
  return spec;
}

bool IsReaderOnly(AccessMode::Mode mode) {
  return mode == AccessMode::SINGLE_NODE_READER_ONLY || mode == AccessMode::MULTI_NODE_READER_ONLY;
}

bool IsSingleNode(AccessMode::Mode mode) {
  return mode == AccessMode::SINGLE_NODE_WRITER || mode == AccessMode::SINGLE_NODE_READER_ONLY ||
         mode == AccessMode::SINGLE_NODE_SINGLE_WRITER ||
         mode == AccessMode::SINGLE_NODE_MULTI_WRITER;
}

}  // namespace stagehand::driver

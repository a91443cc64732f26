#include "csiclient/capability.h"

#include <array>
#include <string>
#include <utility>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

namespace stagehand::csiclient {
namespace {

using M = csi::v1::VolumeCapability::AccessMode;

constexpr std::array<std::pair<reconciler::AccessMode, M::Mode>, 7> kModes{{
    {reconciler::AccessMode::kSingleNodeWriter, M::SINGLE_NODE_WRITER},
    {reconciler::AccessMode::kSingleNodeReaderOnly, M::SINGLE_NODE_READER_ONLY},
    {reconciler::AccessMode::kSingleNodeSingleWriter, M::SINGLE_NODE_SINGLE_WRITER},
    {reconciler::AccessMode::kSingleNodeMultiWriter, M::SINGLE_NODE_MULTI_WRITER},
    {reconciler::AccessMode::kMultiNodeReaderOnly, M::MULTI_NODE_READER_ONLY},
    {reconciler::AccessMode::kMultiNodeSingleWriter, M::MULTI_NODE_SINGLE_WRITER},
    {reconciler::AccessMode::kMultiNodeMultiWriter, M::MULTI_NODE_MULTI_WRITER},
}};

}  // namespace

M::Mode ToCsi(reconciler::AccessMode mode) {
  for (const auto& [ours, csi] : kModes) {
    if (ours == mode) {
      return csi;
    }
  }
  return M::UNKNOWN;
}

void FillCapability(const reconciler::Capability& cap, csi::v1::VolumeCapability* out) {
  if (cap.block) {
    out->mutable_block();
  } else {
    auto* mount = out->mutable_mount();
    mount->set_fs_type(cap.fs_type);
    for (const auto& f : cap.mount_flags) {
      mount->add_mount_flags(f);
    }
  }
  out->mutable_access_mode()->set_mode(ToCsi(cap.access_mode));
}

absl::StatusOr<reconciler::AccessMode> AccessModeNamed(std::string_view csi_name) {
  M::Mode mode{};
  if (M::Mode_Parse(std::string(csi_name), &mode)) {
    for (const auto& [ours, csi] : kModes) {
      if (csi == mode) {
        return ours;
      }
    }
  }
  std::vector<std::string> names;
  for (const auto& [ours, csi] : kModes) {
    names.push_back(M::Mode_Name(csi));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown access mode '", std::string(csi_name),
                                                 "' (", absl::StrJoin(names, ", "), ")"));
}

}  // namespace stagehand::csiclient

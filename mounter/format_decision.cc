#include "mounter/format_decision.h"

#include <absl/strings/str_cat.h>

#include "mounter/filesystem.h"

namespace stagehand::mounter {

absl::StatusOr<FormatAction> DecideFormat(const ProbeResult& probe, std::string_view requested_fs) {
  if (!IsSupportedFsType(requested_fs)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported filesystem type '", ToAbsl(requested_fs), "'"));
  }
  switch (probe.kind) {
    case ProbeResult::Kind::kBlank:
      return FormatAction::kFormat;
    case ProbeResult::Kind::kFilesystem:
      if (probe.type == requested_fs) {
        return FormatAction::kUseExisting;
      }
      return absl::FailedPreconditionError(
          absl::StrCat("device holds a ", probe.type.empty() ? "unknown" : probe.type,
                       " filesystem, but ", ToAbsl(requested_fs), " was requested"));
    case ProbeResult::Kind::kPartitionTable:
      return absl::FailedPreconditionError(
          absl::StrCat("refusing to format: device holds a ", probe.type, " partition table"));
    case ProbeResult::Kind::kOtherSignature:
      return absl::FailedPreconditionError(
          absl::StrCat("refusing to format: device holds a ", probe.type, " signature"));
    case ProbeResult::Kind::kNotZeroed:
      return absl::FailedPreconditionError(
          "refusing to format: device holds non-zero data but no known signature");
  }
  return absl::InternalError("unknown probe result kind");
}

}  // namespace stagehand::mounter

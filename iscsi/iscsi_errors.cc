#include "iscsi/iscsi_errors.h"

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/strip.h>

namespace stagehand::iscsi {

absl::Status MapLibiscsiError(std::string_view what, std::string_view libiscsi_error) {
  const absl::string_view err = absl::StripAsciiWhitespace(ToAbsl(libiscsi_error));
  const std::string message = absl::StrCat(ToAbsl(what), ": ", err);
  const std::string lower = absl::AsciiStrToLower(err);
  auto has = [&](absl::string_view needle) {
    return absl::StrContains(lower, absl::AsciiStrToLower(needle));
  };
  if (has("Authentication failure") || has("CHAP") || has("Authentication")) {
    return absl::UnauthenticatedError(
        absl::StrCat(message, "; check the CHAP user name and secret in the node stage secrets"));
  }
  if (has("Authorization failure")) {
    return absl::PermissionDeniedError(
        absl::StrCat(message, "; the target does not allow this initiator name (check its ACL)"));
  }
  if (has("Target not found") || has("Target removed")) {
    return absl::NotFoundError(absl::StrCat(message, "; check 'iqn'"));
  }
  if (has("LOGICAL_UNIT_NOT_SUPPORTED") || has("LOGICAL UNIT NOT SUPPORTED")) {
    return absl::NotFoundError(absl::StrCat(message, "; check 'lun'"));
  }
  if (has("connect") || has("socket") || has("errno") || has("timed out") || has("timeout") ||
      has("Target moved") || has("Service unavailable") || has("Out of resources") ||
      has("Connection") || has("resolve") || has("Invalid target")) {
    return absl::UnavailableError(message);
  }
  return absl::UnknownError(message);
}

}  // namespace stagehand::iscsi

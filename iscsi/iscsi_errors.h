#pragma once

// Maps libiscsi's error strings (it exposes no error codes for login failures) to status codes
// by what the caller should do next. Pure.

#include <string_view>

#include "base/status.h"

namespace stagehand::iscsi {

// `what` is the operation ("log in to iqn… at 127.0.0.1:3260"); `libiscsi_error` is
// iscsi_get_error(). Unauthenticated for rejected CHAP, PermissionDenied for an initiator the
// target does not allow, NotFound for an unknown target or LUN, Unavailable for network errors
// and targets that are busy or moved, Unknown otherwise.
absl::Status MapLibiscsiError(std::string_view what, std::string_view libiscsi_error);

}  // namespace stagehand::iscsi

#include "base/status.h"

#include <system_error>

#include <absl/strings/str_cat.h>

namespace stagehand {

absl::Status WithContext(const absl::Status& s, std::string_view context) {
  if (s.ok()) {
    return s;
  }
  return {s.code(), absl::StrCat(ToAbsl(context), ": ", s.message())};
}

std::string ErrnoText(int errno_value) {
  return std::generic_category().message(errno_value);
}

absl::Status ErrnoStatus(int errno_value, std::string_view what) {
  return absl::ErrnoToStatus(errno_value, ToAbsl(what));
}

}  // namespace stagehand

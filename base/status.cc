#include "base/status.h"

#include <cstring>

#include <absl/strings/str_cat.h>

namespace stagehand {

absl::Status WithContext(const absl::Status& s, std::string_view context) {
  if (s.ok()) {
    return s;
  }
  return {s.code(), absl::StrCat(ToAbsl(context), ": ", s.message())};
}

absl::Status ErrnoStatus(int errno_value, std::string_view what) {
  return absl::ErrnoToStatus(errno_value, ToAbsl(what));
}

}  // namespace stagehand

#include "base/status.h"

#include <array>
#include <cstring>

#include <absl/strings/str_cat.h>

namespace stagehand {

absl::Status WithContext(const absl::Status& s, std::string_view context) {
  if (s.ok()) {
    return s;
  }
  return {s.code(), absl::StrCat(ToAbsl(context), ": ", s.message())};
}

std::string ErrnoText(int errno_value) {
  std::array<char, 256> buffer{};
  return strerror_r(errno_value, buffer.data(), buffer.size());  // GNU: returns the text.
}

absl::Status ErrnoStatus(int errno_value, std::string_view what) {
  return absl::ErrnoToStatus(errno_value, ToAbsl(what));
}

}  // namespace stagehand

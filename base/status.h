#pragma once

// Status helpers shared by every component: propagation macros (upstream abseil's
// status_macros.h is newer than Debian 12's abseil), context prefixes and fmt support.

#include <cerrno>
#include <string>
#include <string_view>

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>
#include <fmt/format.h>
#include <fmt/ostream.h>

namespace stagehand {

// Debian builds abseil with its own string_view type; these convert at the boundary.
inline absl::string_view ToAbsl(std::string_view s) {
  return {s.data(), s.size()};
}

inline std::string_view ToStd(absl::string_view s) {
  return {s.data(), s.size()};
}

// Returns `s` with "`context`: " prefixed to its message; the code is kept. OK stays OK.
absl::Status WithContext(const absl::Status& s, std::string_view context);

// strerror(3) without its shared buffer (strerror is not thread-safe).
std::string ErrnoText(int errno_value);

// Builds a status from `errno_value` with a message "`what`: <strerror>".
absl::Status ErrnoStatus(int errno_value, std::string_view what);

}  // namespace stagehand

#define SH_STATUS_CONCAT_INNER(a, b) a##b
#define SH_STATUS_CONCAT(a, b) SH_STATUS_CONCAT_INNER(a, b)

#define SH_RETURN_IF_ERROR(expr)                      \
  do {                                                \
    if (absl::Status _sh_st = (expr); !_sh_st.ok()) { \
      return _sh_st;                                  \
    }                                                 \
  } while (0)

// Expands to several statements: never use it as the body of an unbraced if.
#define SH_ASSIGN_OR_RETURN(lhs, rexpr) \
  SH_ASSIGN_OR_RETURN_IMPL(SH_STATUS_CONCAT(_sh_statusor_, __LINE__), lhs, rexpr)

// `statusor` is a name and `lhs` a declaration: neither can be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define SH_ASSIGN_OR_RETURN_IMPL(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                             \
  if (!statusor.ok()) {                                \
    return std::move(statusor).status();               \
  }                                                    \
  lhs = std::move(statusor).value()

// NOLINTEND(bugprone-macro-parentheses)

template <>
struct fmt::formatter<absl::Status> : fmt::ostream_formatter {};

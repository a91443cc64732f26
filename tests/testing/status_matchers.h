#pragma once

// gMock matchers for absl::Status and absl::StatusOr<T> (upstream abseil's status_matchers.h is
// newer than Debian 12's abseil). There is deliberately no NotOk(): assert the code you expect.

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <gmock/gmock.h>

namespace stagehand::testing {

inline const absl::Status& GetStatus(const absl::Status& s) {
  return s;
}

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.ok();
}

MATCHER_P(StatusIs, code, "has status code " + ::testing::PrintToString(code)) {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

MATCHER_P2(StatusIs, code, message_matcher,
           "has status code " + ::testing::PrintToString(code) + " and a matching message") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code &&
         ::testing::Matches(message_matcher)(std::string(s.message().data(), s.message().size()));
}

}  // namespace stagehand::testing

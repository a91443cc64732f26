#include "iscsi/iscsi_errors.h"

#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace stagehand::iscsi {
namespace {

using ::stagehand::testing::StatusIs;

TEST(IscsiErrorsTest, MapsLibiscsiMessagesByWhatToDoNext) {
  struct Case {
    const char* error;
    absl::StatusCode code;
  };

  const Case cases[] = {
      {"Failed to log in to target. Status: Authentication failure(513)",
       absl::StatusCode::kUnauthenticated},
      {"Failed to log in to target. Status: Authorization failure(514)",
       absl::StatusCode::kPermissionDenied},
      {"Failed to log in to target. Status: Target not found(515)", absl::StatusCode::kNotFound},
      {"Connect failed with errno : Connection refused(111)", absl::StatusCode::kUnavailable},
      {"Failed to log in to target. Status: Service unavailable(769)",
       absl::StatusCode::kUnavailable},
      {"something odd", absl::StatusCode::kUnknown},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(MapLibiscsiError("log in", c.error), StatusIs(c.code)) << c.error;
  }
}

}  // namespace
}  // namespace stagehand::iscsi

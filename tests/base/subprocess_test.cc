#include "base/subprocess.h"

#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace stagehand {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;

TEST(SubprocessTest, CapturesOutputAndExitCode) {
  auto r = RunProcess({"sh", "-c", "echo hello; echo oops >&2; exit 3"});

  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_THAT(r->output, HasSubstr("hello"));
  EXPECT_THAT(r->output, HasSubstr("oops"));
}

TEST(SubprocessTest, MissingProgramIsNotFound) {
  EXPECT_THAT(RunProcess({"/nonexistent/program"}), StatusIs(absl::StatusCode::kNotFound));
}

TEST(SubprocessTest, TimeoutKillsTheProgram) {
  RunOptions options;
  options.timeout = std::chrono::milliseconds(50);

  EXPECT_THAT(RunProcess({"sleep", "10"}, options), StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST(SubprocessTest, EmptyArgvIsInvalid) {
  EXPECT_THAT(RunProcess({}), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace stagehand

#include "transport/userspace/session_launcher.h"

#include <gtest/gtest.h>

namespace stagehand::transport::userspace {
namespace {

TEST(SessionUnitNameTest, StableValidAndDistinctPerRuntimeDir) {
  const std::string a = SessionUnitName("/run/stagehand/sessions/aaa");
  EXPECT_EQ(a, SessionUnitName("/run/stagehand/sessions/aaa"));
  EXPECT_NE(a, SessionUnitName("/run/stagehand/sessions/bbb"));
  EXPECT_EQ(a.rfind("stagehand-session-", 0), 0u);
  EXPECT_EQ(a.size(),
            std::string("stagehand-session-").size() + 12 + std::string(".service").size());
  for (char c : a) {
    EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') << a;
  }
}

TEST(DetachedLauncherTest, RejectsAnEmptyCommand) {
  auto launcher = MakeDetachedLauncher();
  EXPECT_EQ(launcher->Name(), "detached");
  EXPECT_EQ(launcher->Launch({}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stagehand::transport::userspace

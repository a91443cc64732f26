#include "transport/userspace/systemd_launcher.h"

#include <gtest/gtest.h>

namespace stagehand::transport::userspace {
namespace {

SystemdLauncherOptions Nowhere() {
  SystemdLauncherOptions options;
  options.bus_address = "unix:path=/nonexistent/stagehand-test/bus";
  return options;
}

TEST(MakeSessionLauncherTest, DetachedNeedsNoBus) {
  auto launcher = MakeSessionLauncher("detached", Nowhere());
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  EXPECT_EQ((*launcher)->Name(), "detached");
}

TEST(MakeSessionLauncherTest, AutoFallsBackToDetachedWithoutSystemd) {
  auto launcher = MakeSessionLauncher("auto", Nowhere());
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  EXPECT_EQ((*launcher)->Name(), "detached");
}

TEST(MakeSessionLauncherTest, SystemdIsRequiredWhenAskedFor) {
  auto launcher = MakeSessionLauncher("systemd", Nowhere());
  ASSERT_FALSE(launcher.ok());
  EXPECT_EQ(launcher.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(launcher.status().message().find("/nonexistent/stagehand-test/bus"),
            absl::string_view::npos)
      << launcher.status();
}

TEST(MakeSessionLauncherTest, UnknownChoiceIsAnError) {
  auto launcher = MakeSessionLauncher("cron", Nowhere());
  ASSERT_FALSE(launcher.ok());
  EXPECT_EQ(launcher.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stagehand::transport::userspace

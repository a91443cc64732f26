#include "base/log.h"

#include <sstream>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

namespace stagehand {
namespace {

TEST(LogLevelsTest, ComponentsGetTheirOwnLevelAndTheRestTheDefault) {
  ASSERT_TRUE(SetLogLevels("warn,reconciler=debug,registration=error").ok());
  EXPECT_EQ(Log(LogComponent::kReconciler).level(), spdlog::level::debug);
  EXPECT_EQ(Log(LogComponent::kRegistration).level(), spdlog::level::err);
  EXPECT_EQ(Log(LogComponent::kCsi).level(), spdlog::level::warn);
  // Applied again: loggers created earlier follow.
  ASSERT_TRUE(SetLogLevels("info").ok());
  EXPECT_EQ(Log(LogComponent::kReconciler).level(), spdlog::level::info);
  EXPECT_EQ(Log(LogComponent::kRegistration).level(), spdlog::level::info);
}

TEST(LogLevelsTest, MistakesAreNamed) {
  auto bad_level = CheckLogLevels("info,reconciler=loud");
  EXPECT_EQ(bad_level.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_level.message().find("'loud'"), absl::string_view::npos) << bad_level;
  auto bad_component = CheckLogLevels("info,reconciller=debug");
  EXPECT_EQ(bad_component.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_component.message().find("'reconciller'"), absl::string_view::npos);
  EXPECT_NE(bad_component.message().find("reconciler"), absl::string_view::npos);
  EXPECT_FALSE(CheckLogLevels("info,debug").ok()) << "two default levels";
  EXPECT_TRUE(CheckLogLevels("debug").ok());
  EXPECT_TRUE(CheckLogLevels(" info , sessions=trace ").ok());
}

TEST(ComponentLogTest, WritesToTheDefaultLoggersSinksUnderItsOwnName) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  sink->set_pattern("[%n] [%l] %v");
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("stagehand", sink));
  RebindComponentLogs();
  ASSERT_TRUE(SetLogLevels("info,metrics=error").ok());

  Log(LogComponent::kManifests).info("declared {}", "vol-a");
  Log(LogComponent::kMetrics).info("hidden");
  Log(LogComponent::kMetrics).error("shown");

  spdlog::set_default_logger(previous);
  RebindComponentLogs();
  EXPECT_EQ(out.str(), "[manifests] [info] declared vol-a\n[metrics] [error] shown\n");
}

}  // namespace
}  // namespace stagehand

#include "iscsi/session_launcher.h"

#include <gtest/gtest.h>

#include "iscsi/session_process.h"

namespace stagehand::iscsi {
namespace {

TEST(ReadyMessageTest, RoundTripsOnlyOnceTheWholeFrameArrived) {
  const std::string payload("\x08\x02\x12\x07serving", 11);
  const std::string frame = FrameReadyMessage(payload);
  ASSERT_EQ(frame.size(), payload.size() + 4);

  for (size_t n = 0; n < frame.size(); ++n) {
    EXPECT_FALSE(UnframeReadyMessage(frame.substr(0, n)).has_value()) << n << " bytes";
  }
  EXPECT_EQ(UnframeReadyMessage(frame), payload);
  // Bytes after the frame (none are sent, but the reader must not mind) are ignored.
  EXPECT_EQ(UnframeReadyMessage(frame + "x"), payload);
}

TEST(ReadyMessageTest, EmptyStatusIsAFrameToo) {
  EXPECT_EQ(UnframeReadyMessage(FrameReadyMessage("")), "");
}

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
}  // namespace stagehand::iscsi

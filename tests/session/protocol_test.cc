#include "session/protocol.h"

#include <gtest/gtest.h>

namespace stagehand::session {
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

}  // namespace
}  // namespace stagehand::session

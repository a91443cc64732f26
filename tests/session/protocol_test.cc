#include "session/protocol.h"

#include <string>

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

state::v1::SessionStatus Died(const std::string& fuse_mode, uint64_t lost_before) {
  state::v1::SessionStatus last;
  last.set_fuse_mode(fuse_mode);
  last.set_lost_ring_requests(lost_before);
  return last;
}

DataPathCounters Holding(uint64_t held) {
  DataPathCounters counters;
  counters.ring_held = held;
  return counters;
}

TEST(LostRingRequestsTest, WhatADeadRingHeldAddsToWhatEarlierOnesLost) {
  EXPECT_EQ(LostRingRequests(Died("io_uring", 0), Holding(3)), 3u);
  EXPECT_EQ(LostRingRequests(Died("io_uring", 2), Holding(3)), 5u);
  EXPECT_EQ(LostRingRequests(Died("io_uring", 2), Holding(0)), 2u);
}

TEST(LostRingRequestsTest, ClassicModeAndUnreadableCountersLoseNothingMore) {
  // Classic /dev/fuse: the kernel resends what the dead process read (FUSE_NOTIFY_RESEND).
  EXPECT_EQ(LostRingRequests(Died("classic", 0), Holding(3)), 0u);
  EXPECT_EQ(LostRingRequests(Died("io_uring", 4), absl::NotFoundError("no counters")), 4u);
}

}  // namespace
}  // namespace stagehand::session

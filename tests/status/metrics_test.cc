#include "status/metrics.h"

#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace stagehand::status {
namespace {

TEST(ListeningAddressTest, BracketsABareIpv6LiteralAndLeavesTheRestAlone) {
  EXPECT_EQ(ListeningAddress("fd00::1:29780"), "[fd00::1]:29780");
  EXPECT_EQ(ListeningAddress("::1:0"), "[::1]:0");
  EXPECT_EQ(ListeningAddress("[fd00::1]:29780"), "[fd00::1]:29780");
  EXPECT_EQ(ListeningAddress("10.0.0.7:29780"), "10.0.0.7:29780");
  EXPECT_EQ(ListeningAddress("0.0.0.0:29780"), "0.0.0.0:29780");
  EXPECT_EQ(ListeningAddress("29780"), "29780");
  EXPECT_EQ(ListeningAddress(""), "");
}

// The family named `name` in `families`, or null.
const prometheus::MetricFamily* Find(const std::vector<prometheus::MetricFamily>& families,
                                     const std::string& name) {
  auto it =
      std::find_if(families.begin(), families.end(), [&](const auto& f) { return f.name == name; });
  return it == families.end() ? nullptr : &*it;
}

TEST(AgentCollectableTest, ASessionShowsWhenItsProcessStarted) {
  transport::SessionSample served;
  served.volume_id = "v1";
  served.state = "UP";
  served.process_started = 1.8e9;
  transport::SessionSample unknown;  // A transport without a process of its own.
  unknown.volume_id = "v2";
  unknown.state = "UP";
  AgentCollectable collectable(nullptr, nullptr, [&] {
    return std::vector<transport::SessionSample>{served, unknown};
  });

  const auto families = collectable.Collect();
  const auto* started = Find(families, "stagehand_session_process_start_time_seconds");

  ASSERT_NE(started, nullptr);
  ASSERT_EQ(started->metric.size(), 1U);
  EXPECT_EQ(started->metric[0].label[0].name, "volume_id");
  EXPECT_EQ(started->metric[0].label[0].value, "v1");
  EXPECT_DOUBLE_EQ(started->metric[0].gauge.value, 1.8e9);
}

TEST(AgentCollectableTest, CountsWhatTheStagesMetOfOtherNodesReservationsPerVolume) {
  AgentCollectable collectable(nullptr, nullptr, {});
  EXPECT_EQ(Find(collectable.Collect(), "stagehand_reservation_takeovers_total"), nullptr)
      << "no built-in driver, no series";
  collectable.SetReservationSource([] {
    return std::vector<driver::ReservationTally>{
        {.volume_id = "v1", .refusals = 3, .takeovers = 1},
        {.volume_id = "v2", .refusals = 0, .takeovers = 0},
    };
  });

  const auto families = collectable.Collect();
  const auto* refusals = Find(families, "stagehand_reservation_refusals_total");
  const auto* takeovers = Find(families, "stagehand_reservation_takeovers_total");

  ASSERT_NE(refusals, nullptr);
  ASSERT_NE(takeovers, nullptr);
  EXPECT_EQ(takeovers->type, prometheus::MetricType::Counter);
  ASSERT_EQ(refusals->metric.size(), 2U);
  ASSERT_EQ(takeovers->metric.size(), 2U);
  EXPECT_EQ(takeovers->metric[0].label[0].name, "volume_id");
  EXPECT_EQ(takeovers->metric[0].label[0].value, "v1");
  EXPECT_DOUBLE_EQ(refusals->metric[0].counter.value, 3);
  EXPECT_DOUBLE_EQ(takeovers->metric[0].counter.value, 1);
  EXPECT_EQ(takeovers->metric[1].label[0].value, "v2");
  EXPECT_DOUBLE_EQ(takeovers->metric[1].counter.value, 0) << "staged: there before any event";
}

}  // namespace
}  // namespace stagehand::status

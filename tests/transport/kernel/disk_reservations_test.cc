#include "transport/kernel/disk_reservations.h"

#include <vector>

#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace stagehand::transport::kernel {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;

TEST(DiskReservationsTest, ReadKeysParsesGenerationAndBigEndianKeys) {
  const std::vector<uint8_t> answer = {0,    0,    0,    7,    0, 0, 0, 16,  //
                                       0x1a, 0x2b, 0x3c, 0x4d, 0, 0, 0, 1,
                                       0x1a, 0x2b, 0x3c, 0x4d, 0, 0, 0, 2};
  iscsi::Reservations r;
  auto listed = ParseReadKeys(answer, &r);
  ASSERT_THAT(listed.status(), IsOk());
  EXPECT_EQ(*listed, 2u);
  EXPECT_EQ(r.generation, 7u);
  EXPECT_EQ(r.keys, (std::vector<uint64_t>{0x1a2b3c4d00000001ULL, 0x1a2b3c4d00000002ULL}));
}

TEST(DiskReservationsTest, ReadKeysSaysWhenTheTargetHasMoreThanFit) {
  const std::vector<uint8_t> answer = {0, 0, 0, 1, 0, 0, 0, 24, 0, 0, 0, 0, 0, 0, 0, 9};
  iscsi::Reservations r;
  auto listed = ParseReadKeys(answer, &r);
  ASSERT_THAT(listed.status(), IsOk());
  EXPECT_EQ(*listed, 3u);
  EXPECT_EQ(r.keys.size(), 1u);
  EXPECT_THAT(ParseReadKeys(std::vector<uint8_t>{0, 0, 0}, &r).status(),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(DiskReservationsTest, ReadReservationParsesHolderAndType) {
  std::vector<uint8_t> answer(24, 0);
  answer[3] = 3;
  answer[7] = 16;
  answer[8] = 0xab;
  answer[15] = 0x05;
  answer[21] = 0x05;  // Scope LU, Write Exclusive - Registrants Only.
  iscsi::Reservations r;
  ASSERT_THAT(ParseReadReservation(answer, &r), IsOk());
  ASSERT_TRUE(r.holder.has_value());
  EXPECT_EQ(*r.holder, 0xab00000000000005ULL);
  EXPECT_EQ(r.type, iscsi::kWriteExclusiveRegistrantsOnly);

  std::vector<uint8_t> none(24, 0);
  ASSERT_THAT(ParseReadReservation(none, &r), IsOk());
  EXPECT_FALSE(r.holder.has_value());
}

TEST(DiskReservationsTest, ReserveOutParametersAreTheTwoKeysBigEndian) {
  const std::vector<uint8_t> p = ReserveOutParameters(0x0102030405060708ULL, 0x1112131415161718ULL);
  ASSERT_EQ(p.size(), 24u);
  EXPECT_EQ(p[0], 0x01);
  EXPECT_EQ(p[7], 0x08);
  EXPECT_EQ(p[8], 0x11);
  EXPECT_EQ(p[15], 0x18);
  EXPECT_EQ(p[20], 0);  // No SPEC_I_PT, ALL_TG_PT or APTPL.
}

TEST(DiskReservationsTest, SenseInBothFormats) {
  ScsiOutcome fixed;
  ReadSense(std::vector<uint8_t>{0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x20, 0x00}, &fixed);
  EXPECT_EQ(fixed.sense_key, 0x05);
  EXPECT_EQ(fixed.asc, 0x20);
  ScsiOutcome descriptor;
  ReadSense(std::vector<uint8_t>{0x72, 0x06, 0x29, 0x00}, &descriptor);
  EXPECT_EQ(descriptor.sense_key, 0x06);
  EXPECT_EQ(descriptor.asc, 0x29);
}

// The kernel sets DRIVER_SENSE (8) with every CHECK CONDITION: sense came, the path is fine.
TEST(DiskReservationsTest, DriverSenseIsNotAFailedTransport) {
  const std::vector<uint8_t> illegal = {0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x20, 0x00};
  const ScsiOutcome o = OutcomeOf(0x02, 0, 0x08, illegal);
  EXPECT_FALSE(o.transport_failed);
  EXPECT_THAT(OutcomeStatus("x", o), StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_TRUE(OutcomeOf(0x00, 0x01, 0, {}).transport_failed);  // DID_NO_CONNECT.
  EXPECT_TRUE(OutcomeOf(0x00, 0, 0x06, {}).transport_failed);  // DRIVER_TIMEOUT.
  EXPECT_FALSE(OutcomeOf(0x18, 0, 0, {}).transport_failed);
}

TEST(DiskReservationsTest, OutcomesMapToTheCodesTheClaimExpects) {
  EXPECT_THAT(OutcomeStatus("x", ScsiOutcome{}), IsOk());
  EXPECT_THAT(OutcomeStatus("x", ScsiOutcome{.status = 0x18}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(OutcomeStatus("x", ScsiOutcome{.status = 0x02, .sense_key = 0x05}),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(OutcomeStatus("x", ScsiOutcome{.status = 0x02, .sense_key = 0x02}),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(OutcomeStatus("x", ScsiOutcome{.transport_failed = true}),
              StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace stagehand::transport::kernel

#include "iscsi/lun_identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace stagehand::iscsi {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::ElementsAre;

// A VPD 0x83 page like tgtd's: a T10 vendor ID (ASCII), an NAA-6 designator (binary) and a
// target-port designator (association 1) that must be ignored.
std::vector<uint8_t> Page83() {
  std::vector<uint8_t> p = {0x00, 0x83, 0x00, 0x00};
  // T10 vendor id, code set 2 (ASCII), association 0, type 1, length 8.
  std::vector<uint8_t> t10 = {0x02, 0x01, 0x00, 0x08, 'I', 'E', 'T', ' ', 'X', '1', ' ', ' '};
  // NAA, code set 1 (binary), association 0, type 3, length 16.
  std::vector<uint8_t> naa = {0x01, 0x03, 0x00, 0x10, 0x60, 0x00, 0x00, 0x00, 0x00, 0x00,
                              0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01};
  // Relative target port, association 1.
  std::vector<uint8_t> port = {0x01, 0x14, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01};
  for (auto* d : {&t10, &naa, &port}) {
    p.insert(p.end(), d->begin(), d->end());
  }
  p[3] = static_cast<uint8_t>(p.size() - 4);
  return p;
}

TEST(LunIdentityTest, ParsesLogicalUnitDesignators) {
  auto d = ParseDeviceIdentificationPage(Page83());

  ASSERT_THAT(d, IsOk());
  EXPECT_THAT(*d, ElementsAre("t10.IET X1", "naa.60000000000000000000000000000001"));
}

TEST(LunIdentityTest, TruncatedPageIsAnError) {
  auto page = Page83();
  page.resize(page.size() - 3);

  EXPECT_THAT(ParseDeviceIdentificationPage(page), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LunIdentityTest, ParsesUnitSerial) {
  std::vector<uint8_t> page = {0x00, 0x80, 0x00, 0x08, 'b', 'e', 'a', 'f', '1', '1', ' ', ' '};

  auto s = ParseUnitSerialPage(page);

  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(*s, "beaf11");
}

TEST(LunIdentityTest, ExpectedWwnAndSerialFailClosed) {
  LunIdentity id;
  id.designators = {"t10.IET X1", "naa.60000000000000000000000000000001"};
  id.serial = "beaf11";

  EXPECT_THAT(CheckExpectedIdentity(id, "60000000000000000000000000000001", "beaf11"), IsOk());
  EXPECT_THAT(CheckExpectedIdentity(id, "", ""), IsOk());
  EXPECT_THAT(CheckExpectedIdentity(id, "60000000000000000000000000000002", ""),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(CheckExpectedIdentity(id, "", "beaf12"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(CheckExpectedIdentity(LunIdentity{}, "", "beaf11"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(LunIdentityTest, SameLunComparesDesignatorsAndSerial) {
  LunIdentity a;
  a.designators = {"naa.60000000000000000000000000000001"};
  a.serial = "beaf11";
  LunIdentity b = a;
  b.serial = "beaf12";

  EXPECT_THAT(CheckSameLun(a, a), IsOk());
  EXPECT_THAT(CheckSameLun(a, b), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(PrimaryWwn(a), "60000000000000000000000000000001");
}

// Only a target that says it has no such page lacks it; a dropped connection or any other
// failure leaves the identity unknown (retry), never empty (fail closed for good).
TEST(LunIdentityTest, OnlyIllegalRequestMeansAVpdPageIsUnsupported) {
  constexpr int kGood = 0x00;
  constexpr int kCheckCondition = 0x02;
  constexpr int kBusy = 0x08;
  constexpr int kLibiscsiError = 0x0f000001;  // SCSI_STATUS_ERROR: the connection went away.
  constexpr int kIllegalRequest = 0x05;
  constexpr int kUnitAttention = 0x06;
  constexpr int kNotReady = 0x02;

  constexpr int kInvalidFieldInCdb = 0x2400;
  constexpr int kLunNotSupported = 0x2500;
  EXPECT_EQ(ClassifyVpdAnswer(true, kGood, 0, 0), VpdAnswer::kData);
  EXPECT_EQ(ClassifyVpdAnswer(true, kCheckCondition, kIllegalRequest, kInvalidFieldInCdb),
            VpdAnswer::kUnsupported);
  EXPECT_EQ(ClassifyVpdAnswer(true, kCheckCondition, kIllegalRequest, kLunNotSupported),
            VpdAnswer::kError)
      << "a LUN being re-created is not a LUN without the page";
  EXPECT_EQ(ClassifyVpdAnswer(false, kGood, 0, 0), VpdAnswer::kError);
  EXPECT_EQ(ClassifyVpdAnswer(true, kLibiscsiError, 0, 0), VpdAnswer::kError);
  EXPECT_EQ(ClassifyVpdAnswer(true, kBusy, 0, 0), VpdAnswer::kError);
  EXPECT_EQ(ClassifyVpdAnswer(true, kCheckCondition, kUnitAttention, 0x2900), VpdAnswer::kError);
  EXPECT_EQ(ClassifyVpdAnswer(true, kCheckCondition, kNotReady, 0x0400), VpdAnswer::kError);
}

TEST(LunIdentityTest, UnitAttentionsThatMayMeanAnotherLunAreRecognised) {
  EXPECT_TRUE(UnitAttentionMayChangeTheLun(0x3f0e));   // Reported LUNs data has changed.
  EXPECT_TRUE(UnitAttentionMayChangeTheLun(0x3f03));   // Inquiry data has changed.
  EXPECT_TRUE(UnitAttentionMayChangeTheLun(0x2900));   // Power on, reset or bus device reset.
  EXPECT_TRUE(UnitAttentionMayChangeTheLun(0x2907));   // I_T nexus loss.
  EXPECT_TRUE(UnitAttentionMayChangeTheLun(0x2a09));   // Capacity data has changed.
  EXPECT_FALSE(UnitAttentionMayChangeTheLun(0x2a01));  // Mode parameters changed.
  EXPECT_FALSE(UnitAttentionMayChangeTheLun(0x3807));  // Thin provisioning threshold.
  EXPECT_FALSE(UnitAttentionMayChangeTheLun(0x0000));
}

}  // namespace
}  // namespace stagehand::iscsi

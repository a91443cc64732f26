#include "mounter/format_decision.h"

#include <ostream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace stagehand::mounter {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using ::testing::HasSubstr;
using Kind = ProbeResult::Kind;

struct DecideCase {
  std::string name;
  ProbeResult probe;
  std::string requested_fs;
  absl::StatusCode code;
  FormatAction action;                // Only when `code` is kOk.
  std::vector<std::string> mentions;  // Substrings of the error message.
};

// Keeps ctest names readable: gtest would otherwise print the struct's bytes.
void PrintTo(const DecideCase& c, std::ostream* os) {
  *os << c.name;
}

class DecideFormatTest : public ::testing::TestWithParam<DecideCase> {};

TEST_P(DecideFormatTest, Decides) {
  const DecideCase& c = GetParam();

  absl::StatusOr<FormatAction> action = DecideFormat(c.probe, c.requested_fs);

  ASSERT_THAT(action, StatusIs(c.code));
  if (c.code == absl::StatusCode::kOk) {
    EXPECT_EQ(*action, c.action);
  }
  for (const std::string& m : c.mentions) {
    EXPECT_THAT(std::string(action.status().message()), HasSubstr(m));
  }
}

const absl::StatusCode kOk = absl::StatusCode::kOk;
const absl::StatusCode kRefused = absl::StatusCode::kFailedPrecondition;
const absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

INSTANTIATE_TEST_SUITE_P(
    Table, DecideFormatTest,
    ::testing::Values(
        DecideCase{"BlankExt4", {Kind::kBlank, "", ""}, "ext4", kOk, FormatAction::kFormat, {}},
        DecideCase{"BlankXfs", {Kind::kBlank, "", ""}, "xfs", kOk, FormatAction::kFormat, {}},
        DecideCase{"SameExt4",
                   {Kind::kFilesystem, "ext4", "4e1c…"},
                   "ext4",
                   kOk,
                   FormatAction::kUseExisting,
                   {}},
        DecideCase{
            "SameXfs", {Kind::kFilesystem, "xfs", ""}, "xfs", kOk, FormatAction::kUseExisting, {}},
        DecideCase{"Ext4WhenXfsRequested",
                   {Kind::kFilesystem, "ext4", ""},
                   "xfs",
                   kRefused,
                   {},
                   {"ext4", "xfs"}},
        DecideCase{"OtherFilesystem",
                   {Kind::kFilesystem, "vfat", ""},
                   "ext4",
                   kRefused,
                   {},
                   {"vfat", "ext4"}},
        DecideCase{
            "Ext3IsNotExt4", {Kind::kFilesystem, "ext3", ""}, "ext4", kRefused, {}, {"ext3"}},
        DecideCase{"DosPartitionTable",
                   {Kind::kPartitionTable, "dos", ""},
                   "ext4",
                   kRefused,
                   {},
                   {"refusing to format", "dos partition table"}},
        DecideCase{"GptPartitionTable",
                   {Kind::kPartitionTable, "gpt", ""},
                   "xfs",
                   kRefused,
                   {},
                   {"gpt partition table"}},
        DecideCase{"LvmMember",
                   {Kind::kOtherSignature, "LVM2_member", ""},
                   "ext4",
                   kRefused,
                   {},
                   {"refusing to format", "LVM2_member signature"}},
        DecideCase{"Ambivalent",
                   {Kind::kOtherSignature, "ambivalent", ""},
                   "ext4",
                   kRefused,
                   {},
                   {"ambivalent"}},
        DecideCase{"NotZeroed",
                   {Kind::kNotZeroed, "", ""},
                   "ext4",
                   kRefused,
                   {},
                   {"refusing to format", "non-zero data"}},
        DecideCase{"UnsupportedRequest", {Kind::kBlank, "", ""}, "btrfs", kInvalid, {}, {"btrfs"}},
        DecideCase{"EmptyRequest", {Kind::kBlank, "", ""}, "", kInvalid, {}, {}},
        DecideCase{"UnsupportedRequestNeverMatchesExisting",
                   {Kind::kFilesystem, "btrfs", ""},
                   "btrfs",
                   kInvalid,
                   {},
                   {}}),
    [](const ::testing::TestParamInfo<DecideCase>& param_info) { return param_info.param.name; });

TEST(DecideFormatSafetyTest, OnlyABlankDeviceIsEverFormatted) {
  const std::vector<ProbeResult> not_blank = {
      {Kind::kFilesystem, "xfs", ""},     {Kind::kFilesystem, "", ""},
      {Kind::kPartitionTable, "dos", ""}, {Kind::kOtherSignature, "crypto_LUKS", ""},
      {Kind::kNotZeroed, "", ""},
  };

  for (const ProbeResult& probe : not_blank) {
    absl::StatusOr<FormatAction> action = DecideFormat(probe, "ext4");

    EXPECT_FALSE(action.ok() && *action == FormatAction::kFormat) << probe.type;
  }
  EXPECT_THAT(DecideFormat({Kind::kBlank, "", ""}, "ext4"), IsOk());
}

}  // namespace
}  // namespace stagehand::mounter

#include "driver/csi_validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace stagehand::driver {
namespace {

using ::stagehand::testing::IsOk;
using ::stagehand::testing::StatusIs;
using AccessMode = csi::v1::VolumeCapability::AccessMode;

csi::v1::VolumeCapability Mount(const std::string& fs, AccessMode::Mode mode) {
  csi::v1::VolumeCapability c;
  c.mutable_mount()->set_fs_type(fs);
  c.mutable_access_mode()->set_mode(mode);
  return c;
}

TEST(CsiValidationTest, PathsMustBeCleanAndAbsolute) {
  EXPECT_THAT(ValidatePathField("/var/lib/x", "target_path"), IsOk());
  EXPECT_THAT(ValidatePathField("", "target_path"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidatePathField("x/y", "target_path"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidatePathField("/x/../y", "target_path"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CsiValidationTest, ReservedDirectoriesAreRefused) {
  EXPECT_THAT(CheckNotReserved("/var/lib/sh/volumes/x", "p", {"/var/lib/sh/volumes"}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckNotReserved("/var/lib", "p", {"/var/lib/sh/volumes"}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckNotReserved("/srv/x", "p", {"/var/lib/sh/volumes"}), IsOk());
}

TEST(CsiValidationTest, MountCapabilities) {
  auto ext4 = ParseCapability(Mount("", AccessMode::SINGLE_NODE_WRITER));
  ASSERT_THAT(ext4, IsOk());
  EXPECT_EQ(ext4->fs_type, "ext4");
  EXPECT_FALSE(ext4->read_only_mode);
  auto ro = ParseCapability(Mount("xfs", AccessMode::MULTI_NODE_READER_ONLY));
  ASSERT_THAT(ro, IsOk());
  EXPECT_TRUE(ro->read_only_mode);
  EXPECT_THAT(ParseCapability(Mount("btrfs", AccessMode::SINGLE_NODE_WRITER)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCapability(Mount("ext4", AccessMode::MULTI_NODE_MULTI_WRITER)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCapability(Mount("ext4", AccessMode::UNKNOWN)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CsiValidationTest, MountFlagsCannotSmuggleOptions) {
  for (const char* flag : {"bind", "remount", "ro,exec", ""}) {
    auto c = Mount("ext4", AccessMode::SINGLE_NODE_WRITER);
    c.mutable_mount()->add_mount_flags(flag);

    EXPECT_THAT(ParseCapability(c), StatusIs(absl::StatusCode::kInvalidArgument)) << flag;
  }
}

TEST(CsiValidationTest, MountFlagsTakeOneQuotedSelinuxContext) {
  const std::string context = R"(context="system_u:object_r:container_file_t:s0:c15,c25")";
  auto c = Mount("ext4", AccessMode::SINGLE_NODE_WRITER);
  c.mutable_mount()->add_mount_flags("noatime");
  c.mutable_mount()->add_mount_flags(context);
  auto spec = ParseCapability(c);
  ASSERT_THAT(spec, IsOk());
  EXPECT_THAT(spec->mount_flags, ::testing::ElementsAre("noatime", context));

  c.mutable_mount()->add_mount_flags("context=system_u:object_r:other_t:s0");
  EXPECT_THAT(ParseCapability(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                           ::testing::HasSubstr("more than one context=")));
  auto smuggled = Mount("ext4", AccessMode::SINGLE_NODE_WRITER);
  smuggled.mutable_mount()->add_mount_flags(R"(context="u:r:t:s0:c1,c2",suid)");
  EXPECT_THAT(ParseCapability(smuggled), StatusIs(absl::StatusCode::kInvalidArgument));
  // A stray quote would make libmount read the next flag's commas as part of one option.
  auto quote = Mount("ext4", AccessMode::SINGLE_NODE_READER_ONLY);
  quote.mutable_mount()->add_mount_flags("x\"");
  EXPECT_THAT(ParseCapability(quote), StatusIs(absl::StatusCode::kInvalidArgument));
  quote.mutable_mount()->clear_mount_flags();
  quote.mutable_mount()->add_mount_flags(R"(context="a,bind,b")");
  EXPECT_THAT(ParseCapability(quote), IsOk()) << "a quoted context alone is one option";
}

TEST(CsiValidationTest, BlockAllowsMultiNodeWriters) {
  csi::v1::VolumeCapability c;
  c.mutable_block();
  c.mutable_access_mode()->set_mode(AccessMode::MULTI_NODE_MULTI_WRITER);

  auto spec = ParseCapability(c);

  ASSERT_THAT(spec, IsOk());
  EXPECT_TRUE(spec->block);
}

TEST(CsiValidationTest, MissingAccessTypeOrModeIsInvalid) {
  csi::v1::VolumeCapability c;
  c.mutable_access_mode()->set_mode(AccessMode::SINGLE_NODE_WRITER);
  EXPECT_THAT(ParseCapability(c), StatusIs(absl::StatusCode::kInvalidArgument));
  csi::v1::VolumeCapability d;
  d.mutable_block();
  EXPECT_THAT(ParseCapability(d), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace stagehand::driver

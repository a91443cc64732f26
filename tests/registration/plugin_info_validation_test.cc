#include "registration/plugin_info_validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace stagehand::registration {
namespace {

using stagehand::testing::IsOk;
using stagehand::testing::StatusIs;
using ::testing::HasSubstr;

pluginregistration::PluginInfo GoodInfo() {
  pluginregistration::PluginInfo info;
  info.set_type("CSIPlugin");
  info.set_name("iscsi.stagehand.dev");
  info.set_endpoint("/var/lib/kubelet/plugins/iscsi.stagehand.dev/csi.sock");
  info.add_supported_versions("1.0.0");
  return info;
}

TEST(PluginInfoValidationTest, ParsesVersionsWithAndWithoutPrefixOrParts) {
  EXPECT_EQ(*ParseCsiVersion("1.0.0"), (CsiVersion{1, 0, 0}));
  EXPECT_EQ(*ParseCsiVersion("v1.9"), (CsiVersion{1, 9, 0}));
  EXPECT_EQ(*ParseCsiVersion("2"), (CsiVersion{2, 0, 0}));
  EXPECT_THAT(ParseCsiVersion(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCsiVersion("1.0.0.1"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCsiVersion("1.x"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCsiVersion("1..0"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseCsiVersion("-1"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PluginInfoValidationTest, PicksTheHighestOneDotXVersion) {
  EXPECT_EQ(*HighestSupportedVersion({"0.3.0", "1.0.0", "v1.5.0", "2.0.0"}), "v1.5.0");
  EXPECT_EQ(*HighestSupportedVersion({"junk", "1.2"}), "1.2");
}

TEST(PluginInfoValidationTest, RejectsVersionListsWithoutOneDotX) {
  EXPECT_THAT(HighestSupportedVersion({"0.3.0", "2.0.0"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[0.3.0, 2.0.0]")));
  EXPECT_THAT(HighestSupportedVersion({}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PluginInfoValidationTest, AcceptsPathAndUnixUrlEndpoints) {
  EXPECT_EQ(*EndpointSocketPath("/run/csi.sock"), "/run/csi.sock");
  EXPECT_EQ(*EndpointSocketPath("unix:///run/csi.sock"), "/run/csi.sock");
  EXPECT_EQ(*EndpointSocketPath("unix:/run/csi.sock"), "/run/csi.sock");
}

TEST(PluginInfoValidationTest, RejectsEmptyRelativeTraversingOrTooLongEndpoints) {
  EXPECT_THAT(EndpointSocketPath(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(EndpointSocketPath("csi.sock"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(EndpointSocketPath("/run/../etc/csi.sock"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(EndpointSocketPath("tcp://127.0.0.1:10000"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(EndpointSocketPath("/" + std::string(120, 'a')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("107")));
}

TEST(PluginInfoValidationTest, AcceptsAWellFormedCsiPlugin) {
  EXPECT_THAT(ValidatePluginInfo(GoodInfo()), IsOk());
}

TEST(PluginInfoValidationTest, RejectsOtherPluginTypes) {
  auto info = GoodInfo();
  info.set_type("DevicePlugin");

  EXPECT_THAT(ValidatePluginInfo(info),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'DevicePlugin'")));
}

TEST(PluginInfoValidationTest, RejectsAnEmptyName) {
  auto info = GoodInfo();
  info.set_name("");

  EXPECT_THAT(ValidatePluginInfo(info),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name is empty")));
}

TEST(PluginInfoValidationTest, RejectsUnsupportedVersions) {
  auto info = GoodInfo();
  info.clear_supported_versions();
  info.add_supported_versions("0.3.0");

  EXPECT_THAT(ValidatePluginInfo(info),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1.x")));
}

TEST(PluginInfoValidationTest, RejectsARelativeEndpoint) {
  auto info = GoodInfo();
  info.set_endpoint("plugins/csi.sock");

  EXPECT_THAT(ValidatePluginInfo(info),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("absolute")));
}

}  // namespace
}  // namespace stagehand::registration

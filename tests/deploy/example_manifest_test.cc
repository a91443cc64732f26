// The example manifest shipped in packaging/ must parse with the agent's manifest parser, so the
// documentation cannot drift from the schema.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "manifests/manifest.h"
#include "tests/testing/status_matchers.h"

namespace stagehand::manifests {
namespace {

using ::stagehand::testing::IsOk;

TEST(ExampleManifestTest, PackagedExampleVolumeParses) {
  const std::string path = std::string(SH_SOURCE_DIR) + "/packaging/example-volume.yaml";

  const auto spec = LoadManifestFile(path);

  ASSERT_THAT(spec.status(), IsOk());
  EXPECT_EQ(spec->name, "pg-data");
  EXPECT_EQ(spec->driver, "iscsi.stagehand.dev");
  EXPECT_EQ(spec->volume_context.at("iqn"), "iqn.2026-11.com.example:storage");
  EXPECT_EQ(spec->publish.size(), 2u);
  EXPECT_THAT(CheckTargetPaths(*spec, "/var/lib/stagehand"), IsOk());
}

}  // namespace
}  // namespace stagehand::manifests

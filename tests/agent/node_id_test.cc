#include "agent/node_id.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace stagehand::agent {
namespace {

using ::testing::HasSubstr;

TEST(NodeIdTest, AcceptsNodeNamesInBothModes) {
  for (const char* id : {"node-1", "ip-10-0-0-7.eu-west-1.compute.internal", "a", "0"}) {
    SCOPED_TRACE(id);
    EXPECT_TRUE(ValidateNodeId(id, /*kubernetes=*/true).ok());
    EXPECT_TRUE(ValidateNodeId(id, /*kubernetes=*/false).ok());
  }
  EXPECT_TRUE(ValidateNodeId(std::string(253, 'a'), /*kubernetes=*/true).ok());
}

TEST(NodeIdTest, RefusesAnUnexpandedVariableInBothModes) {
  for (bool kubernetes : {true, false}) {
    const absl::Status s = ValidateNodeId("$(NODE_NAME)", kubernetes);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("unexpanded variable reference"));
    EXPECT_THAT(s.message(), HasSubstr("spec.nodeName"));
  }
  EXPECT_EQ(ValidateNodeId("node-$(SUFFIX)", false).code(), absl::StatusCode::kInvalidArgument);
}

TEST(NodeIdTest, RefusesAnEmptyId) {
  EXPECT_EQ(ValidateNodeId("", true).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateNodeId("", false).code(), absl::StatusCode::kInvalidArgument);
}

TEST(NodeIdTest, KubernetesModeRefusesWhatTheApiServerRefuses) {
  struct Case {
    std::string id;
    std::string why;
  };

  const Case cases[] = {
      {"Node-1", "lower-case"},   {"node_1", "lower-case"},   {"node 1", "lower-case"},
      {"-node", "start and end"}, {"node-", "start and end"}, {"a..b", "empty label"},
      {".node", "empty label"},   {"node.", "empty label"},   {std::string(254, 'a'), "253"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.id);
    const absl::Status s = ValidateNodeId(c.id, /*kubernetes=*/true);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("not a valid Kubernetes node name"));
    EXPECT_THAT(s.message(), HasSubstr(c.why));
  }
}

TEST(NodeIdTest, StandaloneModeTakesAnyHostName) {
  EXPECT_TRUE(ValidateNodeId("Build_Host", /*kubernetes=*/false).ok());
}

}  // namespace
}  // namespace stagehand::agent

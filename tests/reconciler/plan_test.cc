#include "reconciler/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace stagehand::reconciler {
namespace {

using ::testing::HasSubstr;

VolumeSpec Spec(std::vector<PublishTarget> publish = {{"/srv/a", false}}) {
  VolumeSpec s;
  s.name = "v";
  s.driver = "d.dev";
  s.volume_handle = "h";
  s.capability.fs_type = "ext4";
  s.volume_context = {{"iqn", "iqn.x"}};
  s.publish = std::move(publish);
  return s;
}

ActualVolume Actual(StageState stage, std::vector<ActualTarget> targets = {}) {
  ActualVolume a;
  a.name = "v";
  a.driver = "d.dev";
  a.volume_handle = "h";
  a.capability.fs_type = "ext4";
  a.volume_context = {{"iqn", "iqn.x"}};
  a.staging_path = "/state/g";
  a.stage = stage;
  a.targets = std::move(targets);
  return a;
}

struct Case {
  std::string name;
  bool declared;
  std::optional<ActualVolume> actual;
  bool keep;
  Op want;
};

TEST(PlanTest, ChoosesTheNextOperationInOrder) {
  const std::vector<Case> cases = {
      {"nothing", false, std::nullopt, false, {}},
      {"new volume stages first", true, std::nullopt, false, {OpKind::kStage, "", false}},
      {"uncertain stage is repeated",
       true,
       Actual(StageState::kUncertain),
       false,
       {OpKind::kStage, "", false}},
      {"staged volume publishes",
       true,
       Actual(StageState::kStaged),
       false,
       {OpKind::kPublish, "/srv/a", false}},
      {"uncertain publish is repeated",
       true,
       Actual(StageState::kStaged, {{"/srv/a", false, PublishState::kUncertain}}),
       false,
       {OpKind::kPublish, "/srv/a", false}},
      {"an uncertain stage under a live publish unpublishes it first",
       true,
       Actual(StageState::kUncertain, {{"/srv/a", false, PublishState::kPublished}}),
       false,
       {OpKind::kUnpublish, "/srv/a", false}},
      {"converged",
       true,
       Actual(StageState::kStaged, {{"/srv/a", false, PublishState::kPublished}}),
       false,
       {}},
      {"undeclared target unpublishes before anything else",
       true,
       Actual(StageState::kUncertain, {{"/srv/old", false, PublishState::kPublished}}),
       false,
       {OpKind::kUnpublish, "/srv/old", false}},
      {"read-only flip republishes",
       true,
       Actual(StageState::kStaged, {{"/srv/a", true, PublishState::kPublished}}),
       false,
       {OpKind::kUnpublish, "/srv/a", true}},
      {"removed volume unpublishes first",
       false,
       Actual(StageState::kStaged, {{"/srv/a", false, PublishState::kPublished}}),
       false,
       {OpKind::kUnpublish, "/srv/a", false}},
      {"removed volume with uncertain target unpublishes it",
       false,
       Actual(StageState::kStaged, {{"/srv/a", false, PublishState::kUncertain}}),
       false,
       {OpKind::kUnpublish, "/srv/a", false}},
      {"restart between unpublish and unstage still unstages",
       false,
       Actual(StageState::kStaged),
       false,
       {OpKind::kUnstage, "", false}},
      {"uncertain stage of a removed volume is unstaged",
       false,
       Actual(StageState::kUncertain),
       false,
       {OpKind::kUnstage, "", false}},
      {"record that holds nothing is forgotten",
       false,
       Actual(StageState::kNone),
       false,
       {OpKind::kForget, "", false}},
      {"broken manifest keeps the volume",
       false,
       Actual(StageState::kStaged, {{"/srv/a", false, PublishState::kPublished}}),
       true,
       {}},
  };
  const VolumeSpec spec = Spec();
  for (const auto& c : cases) {
    const Plan plan =
        ComputePlan(c.declared ? &spec : nullptr, c.actual ? &*c.actual : nullptr, c.keep);

    EXPECT_EQ(plan.op, c.want) << c.name << ": got " << OpKindName(plan.op.kind) << " "
                               << plan.op.target_path;
  }
}

TEST(PlanTest, ABrokenManifestSaysWhyNothingHappens) {
  const ActualVolume actual = Actual(StageState::kStaged);

  const Plan plan = ComputePlan(nullptr, &actual, /*keep=*/true);

  EXPECT_THAT(plan.blocked, HasSubstr("does not parse"));
}

TEST(PlanTest, ChangedImmutableFieldsBlockInsteadOfRemounting) {
  const ActualVolume actual =
      Actual(StageState::kStaged, {{"/srv/a", false, PublishState::kPublished}});
  auto with = [](auto edit) {
    VolumeSpec s = Spec();
    edit(s);
    return s;
  };
  const std::vector<std::pair<VolumeSpec, std::string>> cases = {
      {with([](VolumeSpec& s) { s.driver = "other.dev"; }), "driver"},
      {with([](VolumeSpec& s) { s.volume_handle = "h2"; }), "volumeHandle"},
      {with([](VolumeSpec& s) { s.capability.fs_type = "xfs"; }), "capability"},
      {with([](VolumeSpec& s) { s.capability.block = true; }), "capability"},
      {with([](VolumeSpec& s) { s.volume_context["lun"] = "2"; }), "volumeContext"},
  };

  for (const auto& [spec, field] : cases) {
    const Plan plan = ComputePlan(&spec, &actual, false);

    EXPECT_EQ(plan.op.kind, OpKind::kNone) << field;
    EXPECT_THAT(plan.blocked, HasSubstr(field + " changed"));
  }
}

TEST(PlanTest, PublishContextAndSecretsMayChangeInPlace) {
  const ActualVolume actual =
      Actual(StageState::kStaged, {{"/srv/a", false, PublishState::kPublished}});
  VolumeSpec spec = Spec();
  spec.publish_context["x"] = "y";
  spec.secrets_file = "/etc/s.yaml";

  const Plan plan = ComputePlan(&spec, &actual, false);

  EXPECT_EQ(plan.op.kind, OpKind::kNone);
  EXPECT_EQ(plan.blocked, "");
}

TEST(PlanTest, UncertainCodesAreTheKubeletsOnes) {
  for (auto code : {absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kUnavailable,
                    absl::StatusCode::kCancelled, absl::StatusCode::kResourceExhausted,
                    absl::StatusCode::kAborted}) {
    EXPECT_TRUE(IsUncertainCode(code)) << code;
  }
  for (auto code : {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
                    absl::StatusCode::kFailedPrecondition, absl::StatusCode::kInternal}) {
    EXPECT_FALSE(IsUncertainCode(code)) << code;
  }
}

}  // namespace
}  // namespace stagehand::reconciler

#include "reconciler/desired_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace stagehand::reconciler {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

VolumeSpec Spec(const std::string& name, const std::string& handle,
                std::vector<std::string> targets) {
  VolumeSpec s;
  s.name = name;
  s.driver = "d.dev";
  s.volume_handle = handle;
  for (auto& t : targets) {
    s.publish.push_back({std::move(t), false});
  }
  return s;
}

TEST(DesiredStateTest, DeclaresAndReplacesWhatAFileDeclares) {
  DesiredState d;
  EXPECT_THAT(d.Declare("a.yaml", Spec("va", "h1", {"/srv/a"})), ElementsAre("va"));
  EXPECT_EQ(d.FileOf("va"), "a.yaml");
  // The same file now declares another volume: the first is no longer declared.
  EXPECT_THAT(d.Declare("a.yaml", Spec("vb", "h1", {"/srv/a"})), ElementsAre("va", "vb"));
  EXPECT_EQ(d.Find("va"), nullptr);
  ASSERT_NE(d.Find("vb"), nullptr);
  EXPECT_EQ(d.FileOf("vb"), "a.yaml");
}

TEST(DesiredStateTest, RefusesANameHandleOrTargetAnotherFileDeclares) {
  DesiredState d;
  d.Declare("a.yaml", Spec("va", "h1", {"/srv/a"}));

  EXPECT_THAT(d.Declare("b.yaml", Spec("va", "h2", {"/srv/b"})), IsEmpty());
  ASSERT_NE(d.ErrorOf("b.yaml"), nullptr);
  EXPECT_THAT(*d.ErrorOf("b.yaml"), HasSubstr("volume 'va' is already declared in 'a.yaml'"));

  EXPECT_THAT(d.Declare("b.yaml", Spec("vb", "h1", {"/srv/b"})), IsEmpty());
  EXPECT_THAT(*d.ErrorOf("b.yaml"), HasSubstr("volumeHandle 'h1' of driver 'd.dev'"));

  EXPECT_THAT(d.Declare("b.yaml", Spec("vb", "h2", {"/srv/x", "/srv/a"})), IsEmpty());
  EXPECT_THAT(*d.ErrorOf("b.yaml"), HasSubstr("targetPath '/srv/a' is already a target"));
  EXPECT_EQ(d.Find("vb"), nullptr);
  EXPECT_THAT(d.ErrorsWithoutVolume(), ElementsAre(std::pair<const std::string, std::string>(
                                           "b.yaml", *d.ErrorOf("b.yaml"))));

  // Once a.yaml lets go of the handle and the target, b.yaml may have them.
  d.Declare("a.yaml", Spec("va", "h9", {"/srv/z"}));
  EXPECT_THAT(d.Declare("b.yaml", Spec("vb", "h1", {"/srv/a"})), ElementsAre("vb"));
  EXPECT_EQ(d.ErrorOf("b.yaml"), nullptr);
}

TEST(DesiredStateTest, RemoveAndRenameMoveTheDeclaration) {
  DesiredState d;
  d.Declare("a.yaml", Spec("va", "h1", {"/srv/a"}));
  d.Declare("b.yaml", Spec("vb", "h2", {"/srv/b"}));
  d.ReportError("a.yaml", "a.yaml:1: bad");

  // b.yaml is renamed over a.yaml: va goes, vb is declared by a.yaml, the error stays with b.
  EXPECT_THAT(d.Rename("b.yaml", "a.yaml"), ElementsAre("va", "vb"));
  EXPECT_EQ(d.Find("va"), nullptr);
  EXPECT_EQ(d.FileOf("vb"), "a.yaml");
  EXPECT_EQ(d.ErrorOf("a.yaml"), nullptr);
  // va's handle and target are free again.
  EXPECT_THAT(d.Declare("c.yaml", Spec("vc", "h1", {"/srv/a"})), ElementsAre("vc"));

  EXPECT_EQ(d.Remove("a.yaml"), "vb");
  EXPECT_EQ(d.Find("vb"), nullptr);
  EXPECT_EQ(d.Remove("a.yaml"), std::nullopt);
}

}  // namespace
}  // namespace stagehand::reconciler

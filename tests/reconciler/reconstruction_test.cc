#include "reconciler/reconstruction.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/fakes/fake_node_client.h"
#include "tests/testing/status_matchers.h"

namespace stagehand::reconciler {
namespace {

using stagehand::testing::FakeMountTable;
using stagehand::testing::MemoryActualStore;
using ::testing::ElementsAre;

ActualVolume Record(const std::string& name, bool block) {
  ActualVolume v;
  v.name = name;
  v.driver = "d.dev";
  v.volume_handle = "h-" + name;
  v.capability.block = block;
  v.staging_path = "/state/" + name;
  v.stage = StageState::kStaged;
  v.targets = {{"/srv/" + name, false, PublishState::kPublished}};
  return v;
}

TEST(ReconstructionTest, AdoptsWhatIsMountedAndMarksWhatIsGoneUncertain) {
  MemoryActualStore store;
  FakeMountTable mounts;
  ASSERT_TRUE(store.Save(Record("intact", false)).ok());
  ASSERT_TRUE(store.Save(Record("target-gone", false)).ok());
  ASSERT_TRUE(store.Save(Record("staging-gone", false)).ok());
  ASSERT_TRUE(store.Save(Record("block-intact", true)).ok());
  ASSERT_TRUE(store.Save(Record("block-target-gone", true)).ok());
  mounts.mounts = {"/state/intact", "/srv/intact", "/state/target-gone", "/srv/staging-gone",
                   "/srv/block-intact"};

  auto r = Reconstruct(store, mounts);

  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->intact, 2);
  EXPECT_EQ(r->repair, 3);
  std::map<std::string, ActualVolume> by_name;
  for (auto& v : r->volumes) {
    by_name[v.name] = v;
  }
  EXPECT_EQ(by_name["intact"], Record("intact", false));
  EXPECT_EQ(by_name["target-gone"].stage, StageState::kStaged);
  EXPECT_EQ(by_name["target-gone"].targets[0].state, PublishState::kUncertain);
  EXPECT_EQ(by_name["staging-gone"].stage, StageState::kUncertain);
  EXPECT_EQ(by_name["staging-gone"].targets[0].state, PublishState::kPublished);
  EXPECT_EQ(by_name["block-intact"], Record("block-intact", true));
  // A block volume whose publish is gone (a reboot): its device may be gone or reused.
  EXPECT_EQ(by_name["block-target-gone"].stage, StageState::kUncertain);
}

TEST(ReconstructionTest, MarkMissingMountsNamesWhatIsGone) {
  ActualVolume v = Record("v", false);
  EXPECT_THAT(MarkMissingMounts(v, {}), ElementsAre("/state/v", "/srv/v"));
  EXPECT_EQ(v.stage, StageState::kUncertain);
  EXPECT_THAT(MarkMissingMounts(v, {}), ElementsAre());  // Uncertain already.
}

}  // namespace
}  // namespace stagehand::reconciler

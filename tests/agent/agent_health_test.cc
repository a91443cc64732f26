#include "agent/agent_health.h"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace stagehand::agent {
namespace {

using reconciler::VolumePhase;
using reconciler::VolumeStatus;

VolumeStatus Volume(VolumePhase phase, const std::string& condition = "") {
  VolumeStatus v;
  v.phase = phase;
  v.condition = condition;
  return v;
}

TEST(CountVolumesTest, CountsPublishedFailingAndEachPhase) {
  const std::vector<VolumeStatus> volumes = {
      Volume(VolumePhase::kPublished),
      Volume(VolumePhase::kPublished, "I/O errors on the data path"),  // Abnormal: failing.
      Volume(VolumePhase::kError),
      Volume(VolumePhase::kWaiting),
      Volume(VolumePhase::kStaging),
      Volume(VolumePhase::kPending),
  };

  const VolumeCounts counts = CountVolumes(volumes);

  EXPECT_EQ(counts.total, 6);
  EXPECT_EQ(counts.published, 2);
  EXPECT_EQ(counts.failing, 3);
  EXPECT_EQ(counts.by_phase.at(VolumePhase::kPublished), 2);
  EXPECT_EQ(counts.by_phase.at(VolumePhase::kError), 1);
  EXPECT_EQ(counts.by_phase.at(VolumePhase::kWaiting), 1);
  EXPECT_EQ(counts.by_phase.count(VolumePhase::kStaged), 0u);
}

TEST(CountVolumesTest, NoVolumesCountsNothing) {
  const VolumeCounts counts = CountVolumes({});
  EXPECT_EQ(counts.total, 0);
  EXPECT_EQ(counts.published, 0);
  EXPECT_EQ(counts.failing, 0);
  EXPECT_TRUE(counts.by_phase.empty());
}

TEST(VolumePhaseTest, EveryPhaseHasItsOwnName) {
  std::set<std::string> names;
  for (VolumePhase phase : reconciler::kAllVolumePhases) {
    names.insert(std::string(reconciler::VolumePhaseName(phase)));
  }
  EXPECT_EQ(names.size(), std::size(reconciler::kAllVolumePhases));
  EXPECT_FALSE(names.contains("unknown"));
  EXPECT_EQ(reconciler::VolumePhaseName(VolumePhase::kPublished), "published");
  EXPECT_EQ(reconciler::VolumePhaseName(VolumePhase::kForgetting), "forget");
  EXPECT_TRUE(reconciler::IsFailing(VolumePhase::kError));
  EXPECT_TRUE(reconciler::IsFailing(VolumePhase::kWaiting));
  EXPECT_FALSE(reconciler::IsFailing(VolumePhase::kUncertain));
}

}  // namespace
}  // namespace stagehand::agent

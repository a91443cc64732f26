#pragma once

// How the declared volumes stand, counted once for everything that reports it: systemd's
// STATUS= line, the agent API's GetStatus and the stagehand_volumes metric.

#include <map>
#include <string_view>
#include <vector>

#include "reconciler/reconciler.h"
#include "reconciler/volume_phase.h"

namespace stagehand::agent {

struct VolumeCounts {
  int total = 0;
  int published = 0;
  // Needs someone to act: failing or blocked (IsFailing), or reported abnormal by its driver
  // (VolumeStatus::condition).
  int failing = 0;
  std::map<reconciler::VolumePhase, int> by_phase;
};

// A volume counts as failing in VolumeCounts.
bool IsFailingVolume(const reconciler::VolumeStatus& v);

VolumeCounts CountVolumes(const std::vector<reconciler::VolumeStatus>& volumes);

}  // namespace stagehand::agent

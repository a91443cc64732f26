#include "agent/agent_health.h"

namespace stagehand::agent {

bool IsFailingVolume(const reconciler::VolumeStatus& v) {
  return reconciler::IsFailing(v.phase) || !v.condition.empty();
}

VolumeCounts CountVolumes(const std::vector<reconciler::VolumeStatus>& volumes) {
  VolumeCounts counts;
  counts.total = static_cast<int>(volumes.size());
  for (const auto& v : volumes) {
    ++counts.by_phase[v.phase];
    counts.published += v.phase == reconciler::VolumePhase::kPublished ? 1 : 0;
    counts.failing += IsFailingVolume(v) ? 1 : 0;
  }
  return counts;
}

}  // namespace stagehand::agent

#pragma once

// A declared volume's phase as the reconciler reports it: one word for people (the agent API,
// `stagehandctl agent volumes`, the stagehand_volumes{phase} metric, systemd's STATUS= line).

#include <string_view>

namespace stagehand::reconciler {

enum class VolumePhase {
  kPending,       // Declared, nothing done yet (or its stage is not finished).
  kStaging,       // An operation is running: NodeStageVolume ...
  kPublishing,    // ... NodePublishVolume ...
  kUnpublishing,  // ... NodeUnpublishVolume ...
  kUnstaging,     // ... NodeUnstageVolume ...
  kForgetting,    // ... or dropping the record of a volume nothing is left of.
  kStaged,        // Staged, some target not published yet.
  kPublished,     // Staged and every target published.
  kUncertain,     // A stage's outcome is unknown (the record says so): finished or undone next.
  kWaiting,       // Blocked (VolumeStatus::blocked says why).
  kError,         // The current operation fails (VolumeStatus::last_error says why).
};

// "pending", "staging", "publishing", "unpublishing", "unstaging", "forget", "staged",
// "published", "uncertain", "waiting", "error".
std::string_view VolumePhaseName(VolumePhase phase);

// Every phase, in declaration order (for metrics that report a count per phase).
inline constexpr VolumePhase kAllVolumePhases[] = {
    VolumePhase::kPending,      VolumePhase::kStaging,   VolumePhase::kPublishing,
    VolumePhase::kUnpublishing, VolumePhase::kUnstaging, VolumePhase::kForgetting,
    VolumePhase::kStaged,       VolumePhase::kPublished, VolumePhase::kUncertain,
    VolumePhase::kWaiting,      VolumePhase::kError};

// A volume in one of these needs a person (or a driver) to act: error or waiting.
inline bool IsFailing(VolumePhase phase) {
  return phase == VolumePhase::kError || phase == VolumePhase::kWaiting;
}

}  // namespace stagehand::reconciler

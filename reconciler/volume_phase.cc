#include "reconciler/volume_phase.h"

namespace stagehand::reconciler {

std::string_view VolumePhaseName(VolumePhase phase) {
  switch (phase) {
    case VolumePhase::kPending:
      return "pending";
    case VolumePhase::kStaging:
      return "staging";
    case VolumePhase::kPublishing:
      return "publishing";
    case VolumePhase::kUnpublishing:
      return "unpublishing";
    case VolumePhase::kUnstaging:
      return "unstaging";
    case VolumePhase::kForgetting:
      return "forget";
    case VolumePhase::kStaged:
      return "staged";
    case VolumePhase::kPublished:
      return "published";
    case VolumePhase::kUncertain:
      return "uncertain";
    case VolumePhase::kWaiting:
      return "waiting";
    case VolumePhase::kError:
      return "error";
  }
  return "unknown";
}

}  // namespace stagehand::reconciler

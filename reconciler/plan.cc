#include "reconciler/plan.h"

#include <absl/strings/str_cat.h>

namespace stagehand::reconciler {
namespace {

bool Declares(const VolumeSpec& spec, const ActualTarget& target) {
  for (const auto& t : spec.publish) {
    if (t.target_path == target.target_path && t.read_only == target.read_only) {
      return true;
    }
  }
  return false;
}

Plan Teardown(const ActualVolume& actual) {
  for (const auto& t : actual.targets) {
    return {{OpKind::kUnpublish, t.target_path, t.read_only}, ""};
  }
  if (actual.stage == StageState::kNone) {
    return {{OpKind::kForget, "", false}, ""};
  }
  return {{OpKind::kUnstage, "", false}, ""};
}

}  // namespace

std::string ImmutableFieldChanged(const VolumeSpec& desired, const ActualVolume& actual) {
  if (desired.driver != actual.driver) {
    return "driver";
  }
  if (desired.volume_handle != actual.volume_handle) {
    return "volumeHandle";
  }
  if (!(desired.capability == actual.capability)) {
    return "capability";
  }
  if (desired.volume_context != actual.volume_context) {
    return "volumeContext";
  }
  return "";
}

Plan ComputePlan(const VolumeSpec* desired, const ActualVolume* actual, bool keep) {
  if (desired == nullptr) {
    if (actual == nullptr) {
      return {};
    }
    if (keep) {
      return {{},
              "its manifest does not parse; the volume is kept as it is until the file is "
              "fixed or removed"};
    }
    return Teardown(*actual);
  }
  if (actual != nullptr) {
    if (std::string field = ImmutableFieldChanged(*desired, *actual); !field.empty()) {
      return {{},
              absl::StrCat(field,
                           " changed, which cannot change in place; the volume is kept as "
                           "it was staged. Restore the old value, or remove the manifest "
                           "(tearing the volume down) and declare it again")};
    }
    for (const auto& t : actual->targets) {
      if (!Declares(*desired, t)) {
        return {{OpKind::kUnpublish, t.target_path, t.read_only}, ""};
      }
    }
  }
  if (actual == nullptr || actual->stage != StageState::kStaged) {
    // Never (re)stage under a live publish: a re-stage may replace the device the bind mounts
    // point at. Unpublish first; the targets are published again after the stage.
    if (actual != nullptr && !actual->targets.empty()) {
      const ActualTarget& t = actual->targets.front();
      return {{OpKind::kUnpublish, t.target_path, t.read_only}, ""};
    }
    return {{OpKind::kStage, "", false}, ""};
  }
  for (const auto& t : desired->publish) {
    const ActualTarget* have = actual->FindTarget(t.target_path);
    if (have == nullptr || have->state != PublishState::kPublished) {
      return {{OpKind::kPublish, t.target_path, t.read_only}, ""};
    }
  }
  return {};
}

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kNone:
      return "none";
    case OpKind::kStage:
      return "stage";
    case OpKind::kPublish:
      return "publish";
    case OpKind::kUnpublish:
      return "unpublish";
    case OpKind::kUnstage:
      return "unstage";
    case OpKind::kForget:
      return "forget";
    case OpKind::kRecordFile:
      return "record";
  }
  return "unknown";
}

bool IsUncertainCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAborted:
      return true;
    default:
      return false;
  }
}

}  // namespace stagehand::reconciler

#include "reconciler/status_view.h"

#include <set>

namespace stagehand::reconciler {
namespace {

const char* StageName(StageState s) {
  switch (s) {
    case StageState::kNone:
      return "none";
    case StageState::kUncertain:
      return "uncertain";
    case StageState::kStaged:
      return "staged";
  }
  return "unknown";
}

// The phase of a volume while `kind` runs; nullopt when the operation changes nothing a person
// would see (recording a renamed manifest).
std::optional<VolumePhase> RunningPhase(OpKind kind) {
  switch (kind) {
    case OpKind::kStage:
      return VolumePhase::kStaging;
    case OpKind::kPublish:
      return VolumePhase::kPublishing;
    case OpKind::kUnpublish:
      return VolumePhase::kUnpublishing;
    case OpKind::kUnstage:
      return VolumePhase::kUnstaging;
    case OpKind::kForget:
    case OpKind::kNone:
      return VolumePhase::kForgetting;
    case OpKind::kRecordFile:
      return std::nullopt;
  }
  return std::nullopt;
}

// The phase when nothing that shows runs.
VolumePhase RestingPhase(const VolumeStatus& v, const ActualVolume* a) {
  if (!v.last_error.empty()) {
    return VolumePhase::kError;
  }
  if (!v.blocked.empty()) {
    return VolumePhase::kWaiting;
  }
  if (a == nullptr) {
    return VolumePhase::kPending;
  }
  if (a->stage == StageState::kUncertain) {
    return VolumePhase::kUncertain;
  }
  bool all = !v.targets.empty();
  for (const auto& t : v.targets) {
    all = all && t.state == "published";
  }
  if (all) {
    return VolumePhase::kPublished;
  }
  return a->stage == StageState::kStaged ? VolumePhase::kStaged : VolumePhase::kPending;
}

}  // namespace

VolumeStatus VolumeStatusOf(const std::string& name, const DesiredState& desired,
                            const ActualVolume* a, const OperationState* ops) {
  VolumeStatus v;
  v.name = name;
  const VolumeSpec* spec = desired.Find(name);
  v.declared = spec != nullptr;
  if (spec != nullptr) {
    v.manifest_file = desired.FileOf(name);
    v.driver = spec->driver;
    v.volume_handle = spec->volume_handle;
  } else if (a != nullptr) {
    v.manifest_file = a->manifest_file;
    v.driver = a->driver;
    v.volume_handle = a->volume_handle;
  }
  if (const std::string* error = desired.ErrorOf(v.manifest_file)) {
    v.manifest_error = *error;
  }
  v.stage_state = StageName(a != nullptr ? a->stage : StageState::kNone);
  v.staging_path = a != nullptr ? a->staging_path : "";
  std::set<std::string> listed;
  if (a != nullptr) {
    for (const auto& t : a->targets) {
      v.targets.push_back({t.target_path, t.read_only,
                           t.state == PublishState::kPublished ? "published" : "uncertain"});
      listed.insert(t.target_path);
    }
  }
  if (spec != nullptr) {
    for (const auto& t : spec->publish) {
      if (!listed.contains(t.target_path)) {
        v.targets.push_back({t.target_path, t.read_only, "pending"});
      }
    }
  }
  std::optional<VolumePhase> running;
  if (ops != nullptr) {
    v.in_flight = ops->in_flight ? OpKindName(ops->in_flight_op.kind) : "";
    v.blocked = ops->blocked;
    v.last_error = ops->last_error;
    v.condition = ops->condition;
    v.attempts = ops->schedule ? ops->schedule->failures() : 0;
    v.next_retry = ops->next_retry;
    if (ops->in_flight) {
      running = RunningPhase(ops->in_flight_op.kind);
    }
  }
  v.phase = running ? *running : RestingPhase(v, a);
  return v;
}

}  // namespace stagehand::reconciler

#pragma once

// The reconciler's status view: what `stagehandctl agent volumes`, the agent API, /readyz and the
// metrics show of each volume, built from the desired state, the actual state and the operations.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reconciler/actual_state.h"
#include "reconciler/desired_state.h"
#include "reconciler/operation_state.h"
#include "reconciler/volume_phase.h"

namespace stagehand::reconciler {

struct TargetStatus {
  std::string target_path;
  bool read_only = false;
  std::string state;  // "published", "uncertain", "pending" (declared, not published yet).
};

struct VolumeStatus {
  std::string name;
  std::string manifest_file;
  bool declared = false;
  std::string driver;
  std::string volume_handle;
  std::string staging_path;
  VolumePhase phase = VolumePhase::kPending;
  std::string stage_state;  // "none", "uncertain", "staged".
  std::vector<TargetStatus> targets;
  std::string in_flight;       // Operation running now, if any.
  std::string manifest_error;  // The manifest is broken (the last good spec still applies).
  std::string blocked;         // Why it waits (driver missing, immutable field changed, ...).
  std::string last_error;
  std::string condition;  // The driver reports the volume abnormal: why (ReportCondition).
  int attempts = 0;       // Consecutive failures of the current operation.
  std::optional<std::chrono::system_clock::time_point> next_retry;
};

struct ReconcilerStatus {
  uint64_t generation = 0;
  bool ready = false;  // Reconstruction and the first reconcile after DesiredComplete are done.
  std::vector<VolumeStatus> volumes;
  std::map<std::string, std::string> manifest_errors;  // By file, for files with no volume.
  std::vector<std::string> store_errors;
  size_t workers = 0;  // Worker threads alive (they start with work and leave when idle).
};

// The status of volume `name`; `actual` and `operations` are nullptr when there are none.
VolumeStatus VolumeStatusOf(const std::string& name, const DesiredState& desired,
                            const ActualVolume* actual, const OperationState* operations);

}  // namespace stagehand::reconciler

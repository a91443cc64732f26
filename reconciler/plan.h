#pragma once

// The reconciler's decision for one volume, as a pure function of what is declared and what
// exists: the single next operation that moves the volume towards its declared state. Order:
// unpublish targets that are no longer declared, stage (after unpublishing every target if the
// stage is not certain), publish; and for a volume that is no
// longer declared, unpublish every target, then unstage.

#include <optional>
#include <string>

#include "reconciler/actual_state.h"
#include "reconciler/volume_spec.h"

namespace stagehand::reconciler {

enum class OpKind {
  kNone,  // Converged (or blocked: see Plan::blocked).
  kStage,
  kPublish,
  kUnpublish,
  kUnstage,
  kForget,  // Drop a record that holds nothing (never staged, no targets). No CSI call.
  // Record the file that declares the volume now (a renamed manifest). No CSI call; planned by
  // the reconciler, never by ComputePlan.
  kRecordFile,
};

struct Op {
  OpKind kind = OpKind::kNone;
  std::string target_path;  // Publish / unpublish.
  bool read_only = false;   // Publish.

  bool operator==(const Op&) const = default;
};

struct Plan {
  Op op;
  std::string blocked;  // Why nothing may happen although the volume has not converged.
};

// `desired`: the declared spec, or nullptr when no manifest declares the volume. `keep`: the
// volume's manifest exists but is broken (nothing is torn down because of a typo).
Plan ComputePlan(const VolumeSpec* desired, const ActualVolume* actual, bool keep);

// Which immutable field differs ("driver", "volumeHandle", "capability", "volumeContext"), or
// empty when the actual volume can be reconciled to `desired` in place.
std::string ImmutableFieldChanged(const VolumeSpec& desired, const ActualVolume& actual);

const char* OpKindName(OpKind kind);

// Codes after which the outcome of a call is unknown (the kubelet's "uncertain" codes).
bool IsUncertainCode(absl::StatusCode code);

}  // namespace stagehand::reconciler

#pragma once

// Reconstruction: the actual state a restarted reconciler starts from, rebuilt from its records
// and the host's mount table before anything else (the kubelet reconstructs its actual state from
// the pods' volume directories the same way). A record whose mounts are all there is intact and
// adopted as it is; one whose staging or publish mount is gone is marked uncertain, so the
// reconciler repeats or undoes what it describes.

#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "reconciler/actual_state.h"

namespace stagehand::reconciler {

struct Reconstruction {
  std::vector<ActualVolume> volumes;
  std::vector<std::string> errors;  // Unreadable records (skipped).
  int intact = 0;                   // Staged with every target published and mounted.
  int repair = 0;                   // Something to finish or undo.
};

// Reads every record of `store` and checks it against `mounts`.
absl::StatusOr<Reconstruction> Reconstruct(ActualStore& store, MountTable& mounts);

// Marks what `volume` records as staged or published but is not in `mounted` as uncertain.
// Returns the mount points that are gone. A block volume's staging leaves nothing in the mount
// table, so only its publishes are checked.
std::vector<std::string> MarkMissingMounts(ActualVolume& volume,
                                           const std::set<std::string>& mounted);

}  // namespace stagehand::reconciler

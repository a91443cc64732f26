#pragma once

// Whether a staged volume of the built-in driver is usable, from its record, its session and
// the mount table. Thread-safe as far as the transport and the mounter are.

#include <string>
#include <vector>

#include "base/status.h"
#include "driver/staged_volume.h"
#include "mounter/mounter.h"
#include "transport/transport.h"

namespace stagehand::driver {

class VolumeHealth {
 public:
  // Both must outlive this.
  VolumeHealth(transport::Transport& transport, const mounter::Mounter& mounter)
      : transport_(transport), mounter_(mounter) {}

  // OK when the staged volume is usable: stage complete, session healthy, staging mount of its
  // device in place. FailedPrecondition saying what is wrong otherwise.
  absl::Status CheckStagingLive(const StagedVolume& volume) const;

  // The recorded publish targets that are still mounted (or whose mount state cannot be read).
  std::vector<std::string> StillPublished(const StagedVolume& volume) const;

 private:
  transport::Transport& transport_;
  const mounter::Mounter& mounter_;
};

}  // namespace stagehand::driver

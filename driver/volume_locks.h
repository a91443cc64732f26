#pragma once

// At most one CSI operation per volume at a time (CSI spec: "SHOULD return ABORTED when an
// operation is pending for the volume"). Thread-safe.

#include <set>
#include <string>

#include <absl/base/thread_annotations.h>
#include <absl/status/status.h>
#include <absl/strings/str_cat.h>

#include "base/mutex.h"

namespace stagehand::driver {

class VolumeLocks {
 public:
  // Holds the lock on one volume until destroyed; `held()` is false if it was taken.
  class Guard {
   public:
    Guard(VolumeLocks& locks, std::string id) : locks_(locks), id_(std::move(id)) {
      MutexLock lock(locks_.mu_);
      held_ = locks_.busy_.insert(id_).second;
    }

    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;

    ~Guard() {
      if (held_) {
        MutexLock lock(locks_.mu_);
        locks_.busy_.erase(id_);
      }
    }

    bool held() const { return held_; }

   private:
    VolumeLocks& locks_;
    std::string id_;
    bool held_ = false;
  };

  // The status for a call that found its volume's lock taken.
  static absl::Status BusyError(const std::string& volume_id) {
    return absl::AbortedError(
        absl::StrCat("an operation on volume '", volume_id, "' is already in progress"));
  }

 private:
  Mutex mu_;
  std::set<std::string> busy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagehand::driver

#pragma once

// Tells a data path that stopped completing requests while some wait for it (a session process
// that is deadlocked, frozen or otherwise running but not answering) from one that is idle or
// merely slow, from successive looks at its loop device's counters: requests in flight and none
// completed for `timeout` is a stall. A process stopped by a signal is found sooner (its state);
// this catches the rest without ever touching the FUSE mount (which would hang too).
//
// Thread-safe.

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "base/clock.h"
#include "base/mutex.h"
#include "transport/userspace/loop_device.h"

namespace stagehand::transport::userspace {

class StallDetector {
 public:
  explicit StallDetector(std::chrono::milliseconds timeout, const Clock& clock = RealClock::Get())
      : timeout_(timeout), clock_(clock) {}

  // Records a look at the data path `key`. Returns how long requests have waited without a
  // single completion (counted from the first look that saw them) when that is at least the
  // timeout; nullopt otherwise (a stall is only seen over two looks or more).
  std::optional<std::chrono::milliseconds> Observe(const std::string& key, LoopActivity now)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Drops what is known of `key` (its data path is gone).
  void Forget(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Progress {
    uint64_t completed = 0;
    Clock::TimePoint since;  // Of the first look that saw requests waiting and this count.
    bool busy = false;       // That look saw requests in flight.
  };

  const std::chrono::milliseconds timeout_;
  const Clock& clock_;
  Mutex mu_;
  std::map<std::string, Progress> progress_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagehand::transport::userspace

#pragma once

#include <atomic>
#include <chrono>

#include "base/clock.h"

namespace stagehand::testing {

// A clock that moves only when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  TimePoint Now() const override { return TimePoint(std::chrono::nanoseconds(now_ns_.load())); }

  void Advance(std::chrono::nanoseconds d) { now_ns_ += d.count(); }

 private:
  std::atomic<int64_t> now_ns_{1'000'000'000};
};

}  // namespace stagehand::testing

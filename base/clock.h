#pragma once

// Time as a seam: components that schedule retries or probes take a Clock so that unit tests
// can drive them with a manual clock instead of real time.

#include <chrono>

namespace stagehand {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  virtual ~Clock() = default;

  // Monotonic now. Thread-safe.
  virtual TimePoint Now() const = 0;
};

// The steady clock.
class RealClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }

  // A process-wide instance; never destroyed.
  static const Clock& Get();
};

}  // namespace stagehand

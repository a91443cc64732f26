#pragma once

// Exponential backoff with jitter, as used for plugin registration retries and (later) per-volume
// operations: the first retry waits `initial`, each further failure doubles the wait up to `max`,
// and every wait is spread by +/- `jitter` so that many failing peers do not retry in lockstep.

#include <chrono>
#include <cstdint>
#include <random>

#include "base/clock.h"

namespace stagehand {

struct BackoffPolicy {
  std::chrono::milliseconds initial{500};
  std::chrono::milliseconds max{std::chrono::minutes(2)};
  double multiplier = 2.0;
  double jitter = 0.2;  // Fraction of the delay, in [0, 1).
};

// Tracks consecutive failures of one operation and when it may run next.
// Not thread-safe: one owner.
class RetrySchedule {
 public:
  RetrySchedule(const Clock& clock, BackoffPolicy policy, uint64_t seed = std::random_device{}());

  // Records a failure at Now() and schedules the next attempt; returns the delay chosen.
  std::chrono::milliseconds Failed();

  // Records a success: the next failure starts again from `initial`.
  void Succeeded();

  // Consecutive failures since the last success.
  int failures() const { return failures_; }

  // When the next attempt may start (Now() after a success or before any failure).
  Clock::TimePoint next_attempt() const { return next_attempt_; }

  // True when an attempt may start now.
  bool Due() const { return clock_.Now() >= next_attempt_; }

  // The delay without jitter after `failures` consecutive failures (>= 1).
  static std::chrono::milliseconds BaseDelay(const BackoffPolicy& policy, int failures);

 private:
  const Clock& clock_;
  BackoffPolicy policy_;
  std::mt19937_64 random_;
  int failures_ = 0;
  Clock::TimePoint next_attempt_;
};

}  // namespace stagehand

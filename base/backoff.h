#pragma once

// Exponential backoff with jitter, as used for plugin registration retries, per-volume operations
// and (without jitter) iSCSI re-logins: the first retry waits `initial`, each further failure
// doubles the wait up to `max`, and every wait is spread by +/- `jitter` so that many failing peers
// do not retry in lockstep.

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

// The delay after `previous` without jitter: `initial` when `previous` is 0, else `previous` times
// `multiplier`, at most `max`.
std::chrono::milliseconds NextBaseDelay(const BackoffPolicy& policy,
                                        std::chrono::milliseconds previous);

// SplitMix64 (Steele, Lea and Flood, 2014): a UniformRandomBitGenerator with 8 bytes of state,
// plenty for jitter. A std::mt19937_64 holds 2.5 KB, and there is a schedule per declared
// volume (2.5 MB of 1000 volumes' idle memory).
class SplitMix64 {
 public:
  using result_type = uint64_t;  // NOLINT(readability-identifier-naming): the standard's name.

  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  static constexpr result_type min() { return 0; }

  static constexpr result_type max() { return ~result_type{0}; }

  result_type operator()() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31U);
  }

 private:
  uint64_t state_;
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
  SplitMix64 random_;
  int failures_ = 0;
  Clock::TimePoint next_attempt_;
};

}  // namespace stagehand

#include "base/backoff.h"

#include <algorithm>
#include <cmath>

namespace stagehand {

const Clock& RealClock::Get() {
  static const RealClock* const kClock = new RealClock();
  return *kClock;
}

RetrySchedule::RetrySchedule(const Clock& clock, BackoffPolicy policy, uint64_t seed)
    : clock_(clock), policy_(policy), random_(seed), next_attempt_(clock.Now()) {}

std::chrono::milliseconds NextBaseDelay(const BackoffPolicy& policy,
                                        std::chrono::milliseconds previous) {
  if (previous.count() <= 0) {
    return std::min(policy.initial, policy.max);
  }
  const double grown = static_cast<double>(previous.count()) * policy.multiplier;
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::min(grown, static_cast<double>(policy.max.count()))));
}

std::chrono::milliseconds RetrySchedule::BaseDelay(const BackoffPolicy& policy, int failures) {
  const double initial = static_cast<double>(policy.initial.count());
  const double max = static_cast<double>(policy.max.count());
  const double grown = initial * std::pow(policy.multiplier, std::max(0, failures - 1));
  return std::chrono::milliseconds(static_cast<int64_t>(std::min(grown, max)));
}

std::chrono::milliseconds RetrySchedule::Failed() {
  ++failures_;
  const auto base = BaseDelay(policy_, failures_);
  std::uniform_real_distribution<double> spread(-policy_.jitter, policy_.jitter);
  const double factor = 1.0 + spread(random_);
  auto delay =
      std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(base.count()) * factor));
  delay = std::clamp(delay, std::chrono::milliseconds(0), policy_.max);
  next_attempt_ = clock_.Now() + delay;
  return delay;
}

void RetrySchedule::Succeeded() {
  failures_ = 0;
  next_attempt_ = clock_.Now();
}

}  // namespace stagehand

#include "transport/userspace/stall_detector.h"

namespace stagehand::transport::userspace {

std::optional<std::chrono::milliseconds> StallDetector::Observe(const std::string& key,
                                                                LoopActivity now) {
  const Clock::TimePoint t = clock_.Now();
  MutexLock lock(mu_);
  auto [it, first] = progress_.try_emplace(key, Progress{now.completed, t, false});
  Progress& p = it->second;
  if (first || now.in_flight == 0 || now.completed != p.completed || !p.busy) {
    // Idle, moving, or busy only since this look: the clock starts (again) now. The previous
    // look may be long ago (callers ask when they like), so a stall is measured only from a look
    // that already saw requests waiting.
    p = {now.completed, t, now.in_flight > 0};
    return std::nullopt;
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(t - p.since);
  if (waited < timeout_) {
    return std::nullopt;
  }
  return waited;
}

void StallDetector::Forget(const std::string& key) {
  MutexLock lock(mu_);
  progress_.erase(key);
}

}  // namespace stagehand::transport::userspace

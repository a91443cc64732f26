#include "base/stoppable_sleep.h"

#include <condition_variable>

#include "base/mutex.h"

namespace stagehand {

bool SleepUnlessStopped(const std::stop_token& token, std::chrono::milliseconds delay) {
  Mutex mu;
  std::condition_variable_any cv;
  MutexLock lock(mu);
  cv.wait_for(mu, token, delay, [] { return false; });
  return !token.stop_requested();
}

}  // namespace stagehand

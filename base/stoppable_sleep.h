#pragma once

#include <chrono>
#include <stop_token>

namespace stagehand {

// Sleeps for `delay` or until `token` is stopped (a std::jthread's request_stop), whichever comes
// first. Returns false when stopped.
bool SleepUnlessStopped(const std::stop_token& token, std::chrono::milliseconds delay);

}  // namespace stagehand

#pragma once

// Waiting in tests without sleeps: re-check a condition each time inotify reports a change in a
// directory, until it holds or a deadline passes.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "base/dir_watch.h"

namespace stagehand::testing {

// True once `done()` holds; it is checked first, then after every event in `mask` on `dir`.
// False after `timeout` (or when `dir` cannot be watched).
inline bool WaitUntilInDir(const std::string& dir, uint32_t mask, std::chrono::milliseconds timeout,
                           const std::function<bool()>& done) {
  auto watch = DirWatch::Create();
  if (!watch.ok() || !watch->Add(dir, mask).ok()) {
    return false;
  }
  return WaitUntil(*watch, std::chrono::steady_clock::now() + timeout, done);
}

}  // namespace stagehand::testing

#pragma once

// Waiting in tests without sleeps: re-check a condition each time inotify reports a change in a
// directory, until it holds or a deadline passes.

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "base/unique_fd.h"

namespace stagehand::testing {

// True once `done()` holds; it is checked first, then after every event in `mask` on `dir`.
// False after `timeout` (or when `dir` cannot be watched).
inline bool WaitUntilInDir(const std::string& dir, uint32_t mask, std::chrono::milliseconds timeout,
                           const std::function<bool()>& done) {
  UniqueFd fd(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!fd || inotify_add_watch(fd.Get(), dir.c_str(), mask) < 0) {
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (done()) {
      return true;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return false;
    }
    pollfd p{fd.Get(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) > 0) {
      std::array<char, 4096> buffer{};
      while (read(fd.Get(), buffer.data(), buffer.size()) > 0) {
      }
    }
  }
}

}  // namespace stagehand::testing

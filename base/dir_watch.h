#pragma once

// inotify with a wake descriptor: the one way stagehand's loops wait for changes in directories
// (manifests, plugin registration sockets, session status files) and can still be stopped or
// poked from another thread at once.
//
// Owned by one thread (Add, Remove, Wait, Read); only Wake may be called from others.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace stagehand {

class DirWatch {
 public:
  struct Event {
    int wd = -1;          // The watch it came from; -1 for IN_Q_OVERFLOW.
    uint32_t mask = 0;    // IN_* bits.
    uint32_t cookie = 0;  // Pairs the two halves of a rename.
    std::string name;     // The entry in the watched directory; empty for the directory itself.
  };

  static absl::StatusOr<DirWatch> Create();

  // inotify_add_watch: the watch descriptor (the same one again for a path already watched).
  // NotFound when `path` does not exist.
  absl::StatusOr<int> Add(const std::string& path, uint32_t mask);

  // inotify_rm_watch; a descriptor already gone (IN_IGNORED) is fine.
  void Remove(int wd);

  // Blocks until events are queued, Wake was called, or `timeout` passed (nullopt: no limit);
  // Read tells which. An error only when poll itself fails.
  absl::Status Wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  // The events of one read(2), without blocking; empty once nothing is queued. Both halves of
  // a rename normally come in one batch.
  std::vector<Event> Read();

  // The inotify descriptor, readable when events are queued (for an EventLoop instead of Wait).
  int Fd() const { return inotify_.Get(); }

  // Makes the owner's Wait return. Safe from any thread; wakes that come together merge.
  void Wake() const;

 private:
  DirWatch(UniqueFd inotify, UniqueFd wake)
      : inotify_(std::move(inotify)), wake_(std::move(wake)) {}

  UniqueFd inotify_;
  UniqueFd wake_;  // eventfd.
};

// Calls `done` now and after every change `watch` reports until it returns true (then true), or
// until `deadline` (then false). For waits with a condition that a file change makes true.
template <typename Done>
bool WaitUntil(DirWatch& watch, std::chrono::steady_clock::time_point deadline, Done done) {
  while (!done()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !watch.Wait(left + std::chrono::milliseconds(1)).ok()) {
      return false;
    }
    while (!watch.Read().empty()) {
    }
  }
  return true;
}

}  // namespace stagehand

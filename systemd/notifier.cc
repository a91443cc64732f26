#include "systemd/notifier.h"

#include <systemd/sd-daemon.h>

#include <algorithm>

namespace stagehand::systemd {

Notifier::Notifier() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
    watchdog_usec_ = usec;
  }
}

void Notifier::Notify(const std::string& state) const {
  (void)sd_notify(0, state.c_str());
}

timespec Notifier::LoopPeriod(uint64_t max_usec) const {
  uint64_t usec = max_usec;
  if (watchdog_usec_ > 0) {
    usec = std::min<uint64_t>(usec, watchdog_usec_ / 2);
  }
  return {static_cast<time_t>(usec / 1'000'000), static_cast<long>((usec % 1'000'000) * 1000)};
}

}  // namespace stagehand::systemd

#pragma once

// sd_notify(3) for a service run by systemd: READY=1, STATUS=, WATCHDOG=1, STOPPING=1. A no-op
// when the process was not started by systemd (no NOTIFY_SOCKET).

#include <cstdint>
#include <ctime>
#include <string>

namespace stagehand::systemd {

class Notifier {
 public:
  // Reads the watchdog interval systemd set (WATCHDOG_USEC), if any.
  Notifier();

  // Sends one state line, e.g. "READY=1" or "STATUS=serving". Errors are ignored: systemd
  // not listening is not this process's problem.
  void Notify(const std::string& state) const;

  // How long a main loop that pings the watchdog may sleep: half the watchdog interval, at most
  // `max_usec`.
  timespec LoopPeriod(uint64_t max_usec = 2'000'000) const;

  uint64_t watchdog_usec() const { return watchdog_usec_; }

 private:
  uint64_t watchdog_usec_ = 0;
};

}  // namespace stagehand::systemd

#pragma once

// Both sides of systemd's service notification protocol (sd_notify(3), sd_listen_fds(3)), with
// file descriptors: a service sends "KEY=VALUE" lines, and descriptors over SCM_RIGHTS, to the
// datagram socket named by $NOTIFY_SOCKET; its manager keeps what it is sent with FDSTORE=1
// and hands it back to the next instance as descriptors 3, 4, ... named by $LISTEN_FDNAMES.
//
// The service side works under systemd itself and under any manager that speaks the same
// protocol (the session keeper, iscsi/session_keeper.h, which implements the manager side with
// NotifySocket below). Written here rather than taken from libsystemd so that the session
// binary stays free of it and the keeper can be the other end.

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace stagehand {

// Sends `state` ("READY=1", "WATCHDOG=1", "FDSTORE=1\nFDNAME=fuse", ...) with `fds` to
// $NOTIFY_SOCKET. OK and nothing sent when the variable is unset (no manager listens).
absl::Status NotifyServiceManager(std::string_view state, std::span<const int> fds = {});

// From now on notifications go to `address` instead of $NOTIFY_SOCKET (a manager that took
// over from one that died).
void SetNotifySocket(std::string address);

// $WATCHDOG_USEC, when the manager wants WATCHDOG=1 at least that often (and $WATCHDOG_PID,
// if set, is this process); 0 otherwise.
uint64_t WatchdogIntervalUsec();

// The descriptors a manager passed ($LISTEN_FDS, from descriptor 3, named by $LISTEN_FDNAMES),
// by name; made close-on-exec, and the variables removed so that children do not see them.
// Empty when none were passed, or when $LISTEN_PID names another process.
std::map<std::string, UniqueFd> TakeListenFds();

// "A=1\nB=x" -> {A: 1, B: x}; lines without '=' are skipped.
std::map<std::string, std::string> ParseNotifyState(std::string_view state);

// One message a service sent.
struct NotifyMessage {
  int sender_pid = 0;  // From the kernel's credentials, not from the message.
  std::map<std::string, std::string> fields;
  std::vector<UniqueFd> fds;
};

// The manager's side: a datagram socket a service's notifications arrive on.
class NotifySocket {
 public:
  // Binds `address` (a path, or "@name" for the abstract namespace). Internal on failure.
  static absl::StatusOr<NotifySocket> Bind(const std::string& address);

  NotifySocket() = default;
  NotifySocket(NotifySocket&&) noexcept = default;
  NotifySocket& operator=(NotifySocket&&) noexcept = default;
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;
  ~NotifySocket() = default;

  // Non-blocking, for poll(2).
  int Fd() const { return fd_.Get(); }

  // The next message; nullopt when none waits.
  std::optional<NotifyMessage> Receive();

 private:
  explicit NotifySocket(UniqueFd fd) : fd_(std::move(fd)) {}

  UniqueFd fd_;
};

}  // namespace stagehand

#pragma once

// Keeps one program running the way systemd keeps a service with Restart=on-abnormal,
// FileDescriptorStoreMax= and WatchdogSec=, for hosts without systemd: the program talks to its
// keeper exactly as to systemd ($NOTIFY_SOCKET, base/service_notify.h), so it has one way of
// doing things under both.
//
// - It starts the program with the given stdin and stdout (later starts get /dev/null), and
//   every restart runs the same file as the first start, whatever is at its path by then.
// - It keeps the descriptors the program sends with FDSTORE=1 (by FDNAME; FDSTOREREMOVE=1
//   drops them) and hands them to the next start as $LISTEN_FDS / $LISTEN_FDNAMES.
// - When the program dies of a signal (a crash, SIGKILL, the OOM killer) or stops sending
//   WATCHDOG=1 for the watchdog interval ($WATCHDOG_USEC; then it is killed with SIGKILL), it is
//   started again after `restart_delay`, at most `start_limit_burst` times per
//   `start_limit_interval` (then the keeper gives up, as systemd does).
// - When it exits with a status of its own, the keeper exits with that status.
// - It ignores SIGPIPE and SIGHUP: a log pipe without a reader, or a hangup, never ends it.
// - SIGTERM or SIGINT to the keeper is passed on to the program as SIGTERM; the keeper exits
//   once the program did, and never restarts it after that.
// - It can adopt a program that runs already (whose keeper died): it watches that process
//   through a pidfd, holds the descriptors it was handed as if they had been stored, and starts
//   the program again when the process dies, unless it said STOPPING=1 first (a process that
//   is not the keeper's child cannot be waited for: EXIT_STATUS= gives the keeper's status).

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "base/unique_fd.h"

namespace stagehand::session {

struct KeeperOptions {
  std::vector<std::string> argv;  // argv[0] is an absolute path.
  int stdin_fd = 0;               // For the first start.
  int stdout_fd = 1;
  std::chrono::milliseconds watchdog{0};  // 0: none.
  std::chrono::milliseconds restart_delay{100};
  // A program that keeps dying is given up on after this many starts within the interval.
  int start_limit_burst = 30;
  std::chrono::seconds start_limit_interval{10};
  // Set in the program's environment, besides the protocol's variables.
  std::map<std::string, std::string> env;
};

// A running process to keep instead of starting the program first.
struct KeeperAdoption {
  int pid = 0;  // 0: none.
  UniqueFd pidfd;
  // Gets "<keeper pid> <notification address>\n" once the keeper listens there, then closes.
  UniqueFd ready;
  std::map<std::string, std::vector<UniqueFd>> store;  // As if sent with FDSTORE=1.
};

// Runs the program until it exits on its own or after a stop; returns the exit status to use
// (its own, 1 when it could not be started or restarted, 0 after a stop it obeyed).
int RunKeeper(const KeeperOptions& options, KeeperAdoption adoption = {});

}  // namespace stagehand::session

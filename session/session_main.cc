// The session binary's entry: the session process, its keeper (session/keeper.h), or the
// probe the agent runs at start (session/protocol.h).

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "base/build_id.h"
#include "base/file_io.h"
#include "base/process.h"
#include "base/service_notify.h"
#include "session/keeper.h"
#include "session/protocol.h"
#include "session/session_process.h"

namespace stagehand::session {

int SessionMain(const std::vector<std::string>& args) {
  // Both roles hold the CHAP secrets (the session in its config, the keeper in what the session
  // leaves with it): no core dump may carry them.
  NeverDumpCore();
  bool keeper = false;
  int watchdog_ms = 0;
  int adopt_pid = 0;
  for (const std::string& arg : args) {
    if (arg == kProbeArgument) {
      // The agent's check at start that this binary runs as a session at all (a binary
      // replaced by a broken one is flagged then, not at the next stage or restart).
      const auto build = FileBuildId("/proc/self/exe");
      std::printf("%s %s\n", kProbeAnswer, build.ok() ? build->c_str() : "unknown");
      return std::fflush(stdout) == 0 ? 0 : 1;
    }
    if (arg == "--keeper") {
      keeper = true;
    } else if (arg.starts_with(kAdoptArgument)) {
      if (!absl::SimpleAtoi(arg.substr(std::strlen(kAdoptArgument)), &adopt_pid)) {
        adopt_pid = 0;
      }
    } else if (arg.starts_with("--watchdog-ms=")) {
      if (!absl::SimpleAtoi(arg.substr(std::strlen("--watchdog-ms=")), &watchdog_ms)) {
        watchdog_ms = 0;
      }
    }
  }
  if (!keeper) {
    const int exit_status = RunSessionProcess(STDIN_FILENO, STDOUT_FILENO);
    // Its own decision, for a keeper that adopted it (and cannot wait for it).
    (void)NotifyServiceManager(absl::StrCat("STOPPING=1\nEXIT_STATUS=", exit_status));
    return exit_status;
  }
  // The keeper's own command line, as executed (a relocated bundle runs through its loader),
  // without --keeper, is the session's.
  KeeperOptions options;
  const auto cmdline = ReadFileToString("/proc/self/cmdline");
  for (absl::string_view word : absl::StrSplit(cmdline.value_or(""), '\0', absl::SkipEmpty())) {
    if (word != "--keeper" && !absl::StartsWith(word, kAdoptArgument)) {
      options.argv.emplace_back(word);
    }
  }
  options.stdin_fd = STDIN_FILENO;
  options.stdout_fd = STDOUT_FILENO;
  options.watchdog = std::chrono::milliseconds(watchdog_ms);
  KeeperAdoption adoption;
  if (adopt_pid > 0) {
    // Started by the session process itself, whose keeper died (session/keeper_watch.h), which
    // waits for this process to exit: the keeper is its child, and belongs to init.
    const pid_t keeper_pid = fork();
    if (keeper_pid < 0) {
      return 1;
    }
    if (keeper_pid > 0) {
      _exit(0);
    }
    adoption.pid = adopt_pid;
    adoption.pidfd.Reset(kAdoptPidfd);
    adoption.ready.Reset(kAdoptReady);
    adoption.store["handover"].emplace_back(kAdoptHandover);
    adoption.store["fuse"].emplace_back(kAdoptFuse);
    for (int fd : {kAdoptPidfd, kAdoptReady, kAdoptHandover, kAdoptFuse}) {
      (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  }
  options.env[kKeeperVariable] = std::to_string(getpid());  // After the fork above.
  return RunKeeper(options, std::move(adoption));
}

}  // namespace stagehand::session

#include "transport/userspace/session_launcher.h"

#include <signal.h>

#include <absl/strings/str_cat.h>

#include "base/process.h"
#include "base/sha256.h"
#include "base/spawn.h"

namespace stagehand::transport::userspace {
namespace {

class DetachedLauncher : public SessionLauncher {
 public:
  absl::Status Launch(const SessionLaunch& launch) override {
    if (launch.argv.empty()) {
      return absl::InvalidArgumentError("empty session command");
    }
    // The session's keeper, in a new session, reparented to init at once: it never becomes the
    // agent's zombie and outlives it. It runs the same command without --keeper, and again when
    // that dies. stdin/stdout are the config and ready pipes (for the first start); stderr stays
    // the agent's (its log).
    std::vector<std::string> argv = launch.argv;
    argv.emplace_back("--keeper");
    if (launch.watchdog.count() > 0) {
      argv.push_back(absl::StrCat("--watchdog-ms=", launch.watchdog.count() * 1000));
    }
    if (auto spawned = SpawnDetached(argv, launch.stdin_fd, launch.stdout_fd); !spawned.ok()) {
      return absl::InternalError(
          absl::StrCat("could not start the session process: ", spawned.message()));
    }
    return absl::OkStatus();
  }

  absl::Status StopSupervisor(const state::v1::UserspaceSessionRecord& session) override {
    if (session.keeper_pid() > 0 &&
        IsSameProcessAlive(session.keeper_pid(), session.keeper_start_time())) {
      kill(session.keeper_pid(), SIGTERM);  // It passes SIGTERM on and restarts nothing.
    }
    return absl::OkStatus();
  }

  bool Supervised(const state::v1::UserspaceSessionRecord& session) override {
    return session.keeper_pid() > 0 &&
           IsSameProcessAlive(session.keeper_pid(), session.keeper_start_time());
  }

  std::string_view Name() const override { return "detached"; }
};

}  // namespace

std::unique_ptr<SessionLauncher> MakeDetachedLauncher() {
  return std::make_unique<DetachedLauncher>();
}

std::string SessionUnitName(const std::string& runtime_dir, uint32_t generation) {
  return absl::StrCat("stagehand-session-", Sha256Hex(runtime_dir).substr(0, 12),
                      generation == 0 ? "" : absl::StrCat("-", generation), ".service");
}

}  // namespace stagehand::transport::userspace

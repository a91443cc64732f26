#include "iscsi/session_launcher.h"

#include <absl/strings/str_cat.h>

#include "base/sha256.h"
#include "base/spawn.h"

namespace stagehand::iscsi {
namespace {

class DetachedLauncher : public SessionLauncher {
 public:
  absl::Status Launch(const SessionLaunch& launch) override {
    if (launch.argv.empty()) {
      return absl::InvalidArgumentError("empty session command");
    }
    // A new session, reparented to init at once: it never becomes the agent's zombie and
    // outlives it. stdin/stdout are the config and ready pipes; stderr stays the agent's (its log).
    if (auto spawned = SpawnDetached(launch.argv, launch.stdin_fd, launch.stdout_fd);
        !spawned.ok()) {
      return absl::InternalError(
          absl::StrCat("could not start the session process: ", spawned.message()));
    }
    return absl::OkStatus();
  }

  std::string_view Name() const override { return "detached"; }
};

}  // namespace

std::unique_ptr<SessionLauncher> MakeDetachedLauncher() {
  return std::make_unique<DetachedLauncher>();
}

std::string SessionUnitName(const std::string& runtime_dir) {
  return absl::StrCat("stagehand-session-", Sha256Hex(runtime_dir).substr(0, 12), ".service");
}

}  // namespace stagehand::iscsi

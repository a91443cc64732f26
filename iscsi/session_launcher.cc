#include "iscsi/session_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <absl/strings/str_cat.h>

#include "base/sha256.h"

namespace stagehand::iscsi {
namespace {

class DetachedLauncher : public SessionLauncher {
 public:
  absl::Status Launch(const SessionLaunch& launch) override {
    if (launch.argv.empty()) {
      return absl::InvalidArgumentError("empty session command");
    }
    std::vector<const char*> argv;
    argv.reserve(launch.argv.size() + 1);
    for (const auto& a : launch.argv) {
      argv.push_back(a.c_str());
    }
    argv.push_back(nullptr);
    const pid_t child = fork();
    if (child < 0) {
      return ErrnoStatus(errno, "fork session process");
    }
    if (child == 0) {
      // Only async-signal-safe calls from here on. A new session, and a second fork so that the
      // process is reparented to init and never becomes the agent's zombie.
      setsid();
      const pid_t grandchild = fork();
      if (grandchild != 0) {
        _exit(grandchild < 0 ? 1 : 0);
      }
      // stdin/stdout are the config and ready pipes; stderr stays the agent's (its log).
      if (dup2(launch.stdin_fd, STDIN_FILENO) < 0 || dup2(launch.stdout_fd, STDOUT_FILENO) < 0) {
        _exit(127);
      }
      for (int fd = 3; fd < 1024; ++fd) {
        close(fd);
      }
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execv(argv[0], const_cast<char* const*>(argv.data()));
      _exit(127);
    }
    int wstatus = 0;
    while (waitpid(child, &wstatus, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      return absl::InternalError("could not start the session process");
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

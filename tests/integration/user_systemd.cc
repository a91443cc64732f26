#include "tests/integration/user_systemd.h"

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/strip.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "base/subprocess.h"
#include "base/unique_fd.h"

namespace stagehand::testing {
namespace {

void KillAndReap(pid_t& pid) {
  if (pid <= 0) {
    return;
  }
  kill(pid, SIGTERM);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  pid = -1;
}

}  // namespace

absl::Status EnterPrivateSystemdNamespace() {
  if (unshare(CLONE_NEWNS) != 0) {
    return ErrnoStatus(errno, "unshare(CLONE_NEWNS)");
  }
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return ErrnoStatus(errno, "make / private");
  }
  SH_RETURN_IF_ERROR(MakeDirs("/run/systemd", 0755));
  if (mount("tmpfs", "/run/systemd", "tmpfs", 0, "mode=0755") != 0) {
    return ErrnoStatus(errno, "mount tmpfs on /run/systemd");
  }
  return MakeDirs("/run/systemd/system", 0755);
}

UserSystemd::~UserSystemd() {
  Stop();
}

absl::Status UserSystemd::Start(const std::string& dir) {
  SH_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  bus_address_ = absl::StrCat("unix:path=", JoinPath(dir, "bus"));
  // --fork returns once the bus listens.
  SH_ASSIGN_OR_RETURN(ProcessResult dbus,
                      RunProcess({"dbus-daemon", "--session", "--address=" + bus_address_, "--fork",
                                  "--print-pid", "--nopidfile"}));
  if (dbus.exit_code != 0 ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(dbus.output), &dbus_pid_)) {
    return absl::InternalError(absl::StrCat("dbus-daemon: ", dbus.output));
  }
  setenv("XDG_RUNTIME_DIR", dir.c_str(), 1);
  setenv("DBUS_SESSION_BUS_ADDRESS", bus_address_.c_str(), 1);

  // The manager reports READY=1 on $NOTIFY_SOCKET once it is up and on the bus.
  const std::string notify_path = JoinPath(dir, "notify");
  UniqueFd notify(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, notify_path.c_str(), sizeof(addr.sun_path) - 1);
  unlink(notify_path.c_str());
  if (!notify || bind(notify.Get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return ErrnoStatus(errno, "bind notify socket");
  }
  const std::string log = JoinPath(dir, "systemd.log");
  systemd_pid_ = fork();
  if (systemd_pid_ < 0) {
    return ErrnoStatus(errno, "fork");
  }
  if (systemd_pid_ == 0) {
    setenv("NOTIFY_SOCKET", notify_path.c_str(), 1);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    execl("/lib/systemd/systemd", "systemd", "--user", "--log-target=console", "--log-level=info",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("systemd --user did not report READY=1; see ", log));
    }
    pollfd pfd{notify.Get(), POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left.count())) <= 0) {
      continue;
    }
    std::array<char, 4096> buf{};
    const ssize_t n = recv(notify.Get(), buf.data(), buf.size() - 1, 0);
    if (n > 0 && std::strstr(buf.data(), "READY=1") != nullptr) {
      return absl::OkStatus();
    }
  }
}

void UserSystemd::Stop() {
  KillAndReap(systemd_pid_);  // SIGTERM: the manager stops its units, then exits.
  KillAndReap(dbus_pid_);
}

absl::StatusOr<std::string> UserSystemd::Systemctl(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"systemctl", "--user", "--no-pager"};
  argv.insert(argv.end(), args.begin(), args.end());
  SH_ASSIGN_OR_RETURN(ProcessResult r, RunProcess(argv));
  if (r.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat(ArgvToString(argv), ": exit ", r.exit_code, ": ", r.output));
  }
  return r.output;
}

absl::Status UserSystemd::AdoptIntoScope(const std::string& name, pid_t pid) const {
  std::vector<std::string> argv = {"busctl",
                                   "--address=" + bus_address_,
                                   "call",
                                   "org.freedesktop.systemd1",
                                   "/org/freedesktop/systemd1",
                                   "org.freedesktop.systemd1.Manager",
                                   "StartTransientUnit",
                                   "ssa(sv)a(sa(sv))",
                                   name,
                                   "fail",
                                   "1",
                                   "PIDs",
                                   "au",
                                   "1",
                                   std::to_string(pid),
                                   "0"};
  SH_ASSIGN_OR_RETURN(ProcessResult r, RunProcess(argv));
  if (r.exit_code != 0) {
    return absl::InternalError(absl::StrCat(ArgvToString(argv), ": ", r.output));
  }
  return absl::OkStatus();
}

}  // namespace stagehand::testing

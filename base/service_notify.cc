#include "base/service_notify.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "base/fd_passing.h"

namespace stagehand {
namespace {

const char* Env(const char* name) {
  return getenv(name);  // NOLINT(concurrency-mt-unsafe): read before threads change the env.
}

std::mutex& OverrideMutex() {
  static std::mutex mu;
  return mu;
}

std::string& NotifyOverride() {
  static std::string address;  // Guarded by OverrideMutex().
  return address;
}

}  // namespace

void SetNotifySocket(std::string address) {
  const std::lock_guard<std::mutex> lock(OverrideMutex());
  NotifyOverride() = std::move(address);
}

absl::Status NotifyServiceManager(std::string_view state, std::span<const int> fds) {
  std::string overridden;
  {
    const std::lock_guard<std::mutex> lock(OverrideMutex());
    overridden = NotifyOverride();
  }
  const char* address = overridden.empty() ? Env("NOTIFY_SOCKET") : overridden.c_str();
  if (address == nullptr || address[0] == '\0') {
    return absl::OkStatus();
  }
  sockaddr_un sa{};
  socklen_t sa_len = 0;
  SH_RETURN_IF_ERROR(ToUnixAddress(address, &sa, &sa_len));
  UniqueFd fd(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    return ErrnoStatus(errno, "notification socket");
  }
  const absl::Status sent = SendWithFds(fd.Get(), state, fds, &sa, sa_len);
  if (!sent.ok()) {
    return absl::Status(sent.code(), absl::StrCat("notify the service manager at '", address,
                                                  "': ", sent.message()));
  }
  return absl::OkStatus();
}

uint64_t WatchdogIntervalUsec() {
  const char* usec = Env("WATCHDOG_USEC");
  const char* pid = Env("WATCHDOG_PID");
  uint64_t value = 0;
  int for_pid = 0;
  if (usec == nullptr || !absl::SimpleAtoi(usec, &value)) {
    return 0;
  }
  if (pid != nullptr && (!absl::SimpleAtoi(pid, &for_pid) || for_pid != getpid())) {
    return 0;
  }
  return value;
}

std::map<std::string, UniqueFd> TakeListenFds() {
  std::map<std::string, UniqueFd> out;
  const char* count_text = Env("LISTEN_FDS");
  const char* pid_text = Env("LISTEN_PID");
  const std::string names_text = Env("LISTEN_FDNAMES") != nullptr ? Env("LISTEN_FDNAMES") : "";
  int count = 0;
  int pid = 0;
  const bool ours = count_text != nullptr && absl::SimpleAtoi(count_text, &count) && count > 0 &&
                    (pid_text == nullptr || (absl::SimpleAtoi(pid_text, &pid) && pid == getpid()));
  // NOLINTBEGIN(concurrency-mt-unsafe): at start, before any thread.
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_PID");
  unsetenv("LISTEN_FDNAMES");
  // NOLINTEND(concurrency-mt-unsafe)
  if (!ours) {
    return out;
  }
  const std::vector<std::string> names = absl::StrSplit(names_text, ':');
  for (int i = 0; i < count; ++i) {
    const int fd = 3 + i;
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
      continue;
    }
    std::string name =
        static_cast<size_t>(i) < names.size() && !names[static_cast<size_t>(i)].empty()
            ? names[static_cast<size_t>(i)]
            : absl::StrCat("unknown", i);
    out[name] = UniqueFd(fd);  // A second descriptor of the same name closes the first.
  }
  return out;
}

std::map<std::string, std::string> ParseNotifyState(std::string_view state) {
  std::map<std::string, std::string> out;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(state.data(), state.size()), '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq != absl::string_view::npos && eq > 0) {
      out[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
  }
  return out;
}

absl::StatusOr<NotifySocket> NotifySocket::Bind(const std::string& address) {
  BindOptions options;
  options.before_bind = [](int fd) {
    const int one = 1;
    return setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) == 0
               ? absl::OkStatus()
               : ErrnoStatus(errno, "SO_PASSCRED");
  };
  SH_ASSIGN_OR_RETURN(UniqueFd fd, BindUnixSocket(address, SOCK_DGRAM | SOCK_NONBLOCK, options));
  return NotifySocket(std::move(fd));
}

std::optional<NotifyMessage> NotifySocket::Receive() {
  std::optional<ReceivedMessage> received = ReceiveWithFds(fd_.Get());
  if (!received) {
    return std::nullopt;
  }
  NotifyMessage out;
  out.sender_pid = received->sender_pid;
  out.fds = std::move(received->fds);
  out.fields = ParseNotifyState(received->data);
  return out;
}

}  // namespace stagehand

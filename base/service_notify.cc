#include "base/service_notify.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

namespace stagehand {
namespace {

constexpr size_t kMaxFds = 16;

// `address` as a sockaddr_un; its length in `*len`. False when it does not fit.
bool ToSockaddr(const std::string& address, sockaddr_un* sa, socklen_t* len) {
  *sa = sockaddr_un{};
  sa->sun_family = AF_UNIX;
  if (address.empty() || address.size() >= sizeof(sa->sun_path)) {
    return false;
  }
  std::memcpy(sa->sun_path, address.data(), address.size());
  if (address[0] == '@') {
    sa->sun_path[0] = '\0';  // Abstract: no trailing NUL counted.
    *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size());
  } else {
    *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size() + 1);
  }
  return true;
}

const char* Env(const char* name) {
  return getenv(name);  // NOLINT(concurrency-mt-unsafe): read before threads change the env.
}

}  // namespace

absl::Status NotifyServiceManager(std::string_view state, std::span<const int> fds) {
  const char* address = Env("NOTIFY_SOCKET");
  if (address == nullptr || address[0] == '\0') {
    return absl::OkStatus();
  }
  if (fds.size() > kMaxFds) {
    return absl::InvalidArgumentError("too many descriptors for one notification");
  }
  sockaddr_un sa{};
  socklen_t sa_len = 0;
  if (!ToSockaddr(address, &sa, &sa_len)) {
    return absl::InvalidArgumentError(absl::StrCat("bad NOTIFY_SOCKET '", address, "'"));
  }
  UniqueFd fd(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    return ErrnoStatus(errno, "notification socket");
  }
  iovec iov{const_cast<char*>(state.data()), state.size()};
  msghdr msg{};
  msg.msg_name = &sa;
  msg.msg_namelen = sa_len;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::array<char, CMSG_SPACE(sizeof(int) * kMaxFds)> control{};
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  while (sendmsg(fd.Get(), &msg, MSG_NOSIGNAL) < 0) {
    if (errno != EINTR) {
      return ErrnoStatus(errno, absl::StrCat("notify the service manager at '", address, "'"));
    }
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
  sockaddr_un sa{};
  socklen_t sa_len = 0;
  if (!ToSockaddr(address, &sa, &sa_len)) {
    return absl::InvalidArgumentError(absl::StrCat("bad notification address '", address, "'"));
  }
  UniqueFd fd(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) {
    return ErrnoStatus(errno, "notification socket");
  }
  const int one = 1;
  if (setsockopt(fd.Get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) != 0) {
    return ErrnoStatus(errno, "SO_PASSCRED");
  }
  if (bind(fd.Get(), reinterpret_cast<const sockaddr*>(&sa), sa_len) != 0) {
    return ErrnoStatus(errno, absl::StrCat("bind '", address, "'"));
  }
  return NotifySocket(std::move(fd));
}

std::optional<NotifyMessage> NotifySocket::Receive() {
  std::array<char, 4096> text{};
  iovec iov{text.data(), text.size() - 1};
  std::array<char, CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * kMaxFds)> control{};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n = 0;
  do {
    n = recvmsg(fd_.Get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return std::nullopt;
  }
  NotifyMessage out;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET) {
      continue;
    }
    if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
      ucred cred{};
      std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
      out.sender_pid = cred.pid;
    } else if (c->cmsg_type == SCM_RIGHTS) {
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        out.fds.emplace_back(fd);
      }
    }
  }
  out.fields = ParseNotifyState(std::string_view(text.data(), static_cast<size_t>(n)));
  return out;
}

}  // namespace stagehand

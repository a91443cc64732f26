#include "base/fd_passing.h"

#include <array>
#include <cerrno>
#include <cstring>

#include <absl/strings/str_cat.h>

namespace stagehand {

absl::Status SendWithFds(int socket, std::string_view data, std::span<const int> fds,
                         const sockaddr_un* to, socklen_t to_len) {
  if (fds.size() > kMaxPassedFds) {
    return absl::InvalidArgumentError("too many descriptors for one message");
  }
  iovec iov{const_cast<char*>(data.data()), data.size()};
  msghdr msg{};
  msg.msg_name = const_cast<sockaddr_un*>(to);
  msg.msg_namelen = to == nullptr ? 0 : to_len;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::array<char, CMSG_SPACE(sizeof(int) * kMaxPassedFds)> control{};
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  while (sendmsg(socket, &msg, MSG_NOSIGNAL) < 0) {
    if (errno != EINTR) {
      return ErrnoStatus(errno, "sendmsg");
    }
  }
  return absl::OkStatus();
}

std::optional<ReceivedMessage> ReceiveWithFds(int socket) {
  std::array<char, 4096> text{};
  iovec iov{text.data(), text.size()};
  std::array<char, CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * kMaxPassedFds)> control{};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n = 0;
  do {
    n = recvmsg(socket, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return std::nullopt;
  }
  ReceivedMessage out;
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
  out.data.assign(text.data(), static_cast<size_t>(n));
  return out;
}

}  // namespace stagehand

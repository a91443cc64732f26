#pragma once

// Messages with file descriptors over unix sockets (SCM_RIGHTS): what the service notification
// protocol (service_notify.h) and the session handover (session/handover.h) send.

#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "base/unix_socket.h"

namespace stagehand {

inline constexpr size_t kMaxPassedFds = 16;

// Sends `data` with `fds` as one message on `socket` (to `to` when given: datagrams).
absl::Status SendWithFds(int socket, std::string_view data, std::span<const int> fds,
                         const sockaddr_un* to = nullptr, socklen_t to_len = 0);

// One message received from `socket`.
struct ReceivedMessage {
  std::string data;  // Empty with no fds: the peer closed a stream or seqpacket connection.
  std::vector<UniqueFd> fds;  // Close-on-exec.
  int sender_pid = 0;         // With SO_PASSCRED set on the socket; else 0.
};

// Receives one message without waiting: nullopt when none waits (or on an error other than
// the peer closing).
std::optional<ReceivedMessage> ReceiveWithFds(int socket);

}  // namespace stagehand

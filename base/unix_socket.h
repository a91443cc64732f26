#pragma once

// Unix sockets: addresses, binding, connecting, and whether something listens.

#include <sys/socket.h>
#include <sys/un.h>

#include <functional>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace stagehand {

// `address` (a path, or "@name" in the abstract namespace) as a sockaddr_un and its length.
// InvalidArgument when it is empty or too long.
absl::Status ToUnixAddress(const std::string& address, sockaddr_un* sa, socklen_t* len);

struct BindOptions {
  // Unlinks a socket file already at the path first (one a predecessor left).
  bool replace_stale = false;
  // Listens with this backlog after binding (stream and seqpacket sockets); 0: does not listen.
  int listen_backlog = 0;
  // Called with the new socket before it is bound (to set options such as SO_PASSCRED).
  std::function<absl::Status(int fd)> before_bind;
};

// A new close-on-exec unix socket of `type` (SOCK_DGRAM, SOCK_SEQPACKET, ...; may carry
// SOCK_NONBLOCK) bound to `address`. A socket file is created with mode 0600 (root only): umask
// is 0077 while it binds, which is process-wide, so call it where no other thread creates
// files at the same moment.
absl::StatusOr<UniqueFd> BindUnixSocket(const std::string& address, int type,
                                        const BindOptions& options = {});

// A new close-on-exec unix socket of `type` connected to `address`. Unavailable, with the
// reason, when nothing accepts there.
absl::StatusOr<UniqueFd> ConnectUnixSocket(const std::string& address, int type);

// Connects to the unix stream socket at `path` once and closes the connection: OK when something
// accepts. Unavailable with the reason ("connection refused": a stale socket file nobody listens
// on; "no such file") otherwise; InvalidArgument for a path too long for sockaddr_un.
absl::Status CheckListening(const std::string& path);

}  // namespace stagehand

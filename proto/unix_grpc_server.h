#pragma once

// gRPC servers on unix sockets, owner-only.

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "base/status.h"

namespace stagehand {

// Serves `services` on the unix socket at `path` (a file path, no "unix:"), mode 0600 from the
// start: the socket is created under umask 0077, then chmod'ed in case the file system ignored
// it. A socket file already at `path` is removed first, so the caller must hold that socket's
// lock or know that nothing listens there. One idle polling thread; calls that come in together
// each get a thread of their own. Unavailable when gRPC cannot listen.
absl::StatusOr<std::unique_ptr<grpc::Server>> ServeOnUnixSocket(
    const std::string& path, const std::vector<grpc::Service*>& services);

}  // namespace stagehand

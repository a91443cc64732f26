#pragma once

#include <string>

#include "base/status.h"

namespace stagehand {

// Connects to the unix stream socket at `path` once and closes the connection: OK when something
// accepts. Unavailable with the reason ("connection refused": a stale socket file nobody listens
// on; "no such file") otherwise; InvalidArgument for a path too long for sockaddr_un.
absl::Status CheckListening(const std::string& path);

}  // namespace stagehand

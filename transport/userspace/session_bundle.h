#pragma once

// A relocatable copy of the session binary: the binary, its ELF interpreter and every shared
// library it loaded, in one directory on a host path. In Kubernetes the host's systemd starts
// session processes, and it cannot run a binary that only exists inside the agent's container
// image; the bundle runs on the host whatever its distribution ships, through its own dynamic
// loader (`<dir>/lib/ld-linux-….so.2 --library-path <dir>/lib <dir>/stagehand-session`).

#include <string>
#include <vector>

#include "base/status.h"

namespace stagehand::transport::userspace {

// Installs the bundle of `session_binary` under `<bundle_root>/<content hash>/` (once per
// version; a bundle in use is never modified, so upgrades cannot break running sessions) and
// returns the command that runs it.
absl::StatusOr<std::vector<std::string>> InstallSessionBundle(const std::string& session_binary,
                                                              const std::string& bundle_root);

}  // namespace stagehand::transport::userspace

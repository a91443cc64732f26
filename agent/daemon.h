#pragma once

// The `stagehand` daemon: serves the built-in driver's CSI Identity and Node services on a unix
// socket until SIGTERM/SIGINT.

#include <cstdint>
#include <string>

namespace stagehand::agent {

struct DaemonOptions {
  std::string csi_endpoint;  // "unix:///path/csi.sock"; default under the state dir.
  std::string driver_name = "iscsi.stagehand.dev";
  std::string node_id;  // Default: host name.
  std::string state_dir = "/var/lib/stagehand";
  std::string runtime_dir = "/run/stagehand";
  std::string initiator_name;
  std::string iscsi_initiator_conf = "/etc/iscsi/initiatorname.iscsi";
  std::string log_level = "info";
  int64_t max_volumes_per_node = 0;
};

// Runs the daemon; returns the process exit code.
int RunDaemon(DaemonOptions options);

// "unix:///a/b" or "unix:/a/b" -> "/a/b"; "" if not a unix endpoint.
std::string UnixSocketPath(const std::string& endpoint);

}  // namespace stagehand::agent

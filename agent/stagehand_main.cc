// stagehand: the node storage agent. `stagehand --help` lists the flags.

#include <cstring>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "agent/daemon.h"
#include "agent/version.h"
#include "iscsi/session_process.h"
#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  // Internal role: a userspace iSCSI session process started by the transport (fds 3 and 4).
  if (argc >= 2 && std::strcmp(argv[1], "__session") == 0) {
    return stagehand::iscsi::RunSessionProcess(3, 4);
  }
  stagehand::agent::DaemonOptions o;
  CLI::App app{"stagehand: node storage agent with a built-in iSCSI CSI node plugin"};
  app.set_version_flag("--version", std::string(stagehand::agent::kVersion));
  app.add_option("--csi-endpoint", o.csi_endpoint,
                 "CSI endpoint to serve (default unix://<state-dir>/plugins/<driver>/csi.sock)");
  app.add_option("--driver-name", o.driver_name, "CSI driver name")->capture_default_str();
  app.add_option("--node-id", o.node_id, "Node ID reported by NodeGetInfo (default: host name)");
  app.add_option("--state-dir", o.state_dir, "Persistent state directory")->capture_default_str();
  app.add_option("--runtime-dir", o.runtime_dir, "Runtime directory (session processes)")
      ->capture_default_str();
  app.add_option("--initiator-name", o.initiator_name,
                 "iSCSI initiator name (default: /etc/iscsi/initiatorname.iscsi, else generated "
                 "once and kept in the state dir)");
  app.add_option("--max-volumes-per-node", o.max_volumes_per_node,
                 "Reported by NodeGetInfo and enforced by NodeStageVolume; 0 = unlimited")
      ->capture_default_str();
  app.add_option("--log-level", o.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  // Logs go to stderr (journald picks them up under systemd); stdout stays free for tools.
  spdlog::set_default_logger(spdlog::stderr_color_mt("stagehand"));
  spdlog::set_level(spdlog::level::from_str(o.log_level));
  return stagehand::agent::RunDaemon(o);
}

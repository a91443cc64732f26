#pragma once

// The `stagehand` daemon's options (flags and config file), and the step that fills in the
// defaults that depend on other options and refuses bad combinations before anything is touched.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "status/metrics_tls.h"

namespace stagehand::agent {

enum class Mode {
  kStandalone,  // stagehand is the whole stack: registry watcher and reconciler.
  kKubernetes,  // The kubelet reconciles: kubelet paths, registrar only.
};

struct DaemonOptions {
  Mode mode = Mode::kStandalone;
  // The kubelet's root directory (its --root-dir; microk8s, k0s and RKE move it). Kubernetes
  // mode only: the CSI socket, the registration directory and the session bundle go under it.
  std::string kubelet_dir = "/var/lib/kubelet";
  // "unix:///path/csi.sock"; default <state-dir>/plugins/<driver>/csi.sock, or
  // <kubelet-dir>/plugins/<driver>/csi.sock in Kubernetes mode.
  std::string csi_endpoint;
  // Where the registration socket goes (and, standalone, what the watcher watches). Default
  // <state-dir>/plugins_registry, or <kubelet-dir>/plugins_registry in Kubernetes mode.
  std::string registration_dir;
  // The CSI socket path as the registering side sees it, when that differs from ours.
  std::string kubelet_registration_path;
  // Standalone only: watch the registration directory and reconcile the declared volumes.
  bool watch_plugins = true;
  std::string manifest_dir = "/etc/stagehand/volumes.d";
  std::string agent_socket;  // Default <runtime-dir>/agent.sock.
  std::chrono::milliseconds csi_timeout{std::chrono::minutes(2)};
  int max_parallel_operations = 8;
  std::chrono::milliseconds resync_period{std::chrono::minutes(5)};
  // /metrics, /healthz, /readyz; empty = off. Not 9808: that is csi-livenessprobe's default,
  // and with hostNetwork other drivers' probes on the node hold it.
  std::string metrics_address = "127.0.0.1:29780";
  // HTTPS for it, and the CA of the clients that may read /metrics (status/metrics_tls.h).
  status::MetricsTls metrics_tls;
  std::chrono::milliseconds stats_period{std::chrono::seconds(60)};
  // Standalone: between NodeGetVolumeHealth rounds over the staged volumes of drivers that answer
  // it (conditions within seconds, without the stats' filesystem calls); 0: off (the stats
  // rounds report conditions).
  std::chrono::milliseconds health_period{std::chrono::seconds(5)};
  // A userspace session with I/O waiting and none completed for this long (while its process
  // runs and says UP) is reported SessionNotAnswering.
  std::chrono::milliseconds session_stall_timeout{std::chrono::seconds(30)};
  // A userspace session process that misses its watchdog this long is killed and replaced by a
  // successor that takes over its volume's I/O; 0: never.
  std::chrono::seconds session_watchdog{30};
  // Userspace sessions ask for FUSE over io_uring (fuse_ring.h; no handover, see the README).
  bool fuse_io_uring = false;
  std::chrono::milliseconds plugin_probe_period{std::chrono::seconds(30)};
  std::string driver_name = "iscsi.stagehand.dev";
  std::string node_id;  // Default: host name. Checked by ValidateNodeId (node_id.h).
  std::string state_dir = "/var/lib/stagehand";
  std::string runtime_dir = "/run/stagehand";
  // Who starts session processes: "auto" (systemd when it answers on the bus, else detached
  // children), "systemd" or "detached".
  std::string session_launcher = "auto";
  // Default iSCSI transport: "auto" (kernel when the kernel has the initiator and iscsid
  // answers, else userspace), "kernel" or "userspace". A volume's `transport` context key wins.
  std::string iscsi_transport = "auto";
  std::string systemd_bus_address = "unix:path=/run/dbus/system_bus_socket";
  // Where the relocatable session bundle goes (a host path); empty: run the session binary in
  // place. Default in Kubernetes mode: <kubelet-dir>/plugins/<driver>/bin (/run is often
  // mounted noexec). Checked not to be noexec.
  std::string session_bundle_dir;
  // The session binary; empty: stagehand-session next to stagehand, else stagehand itself.
  std::string session_binary;
  std::string initiator_name;
  std::string iscsi_initiator_conf = "/etc/iscsi/initiatorname.iscsi";
  std::string log_level = "info";
  int64_t max_volumes_per_node = 0;
  // Seconds I/O of a userspace session waits for a lost target before it fails with EIO
  // (reconnects go on); a volume's `replacementTimeout` context key wins.
  uint32_t replacement_timeout = 120;
  // Seconds a stage of a single-node volume waits for a dead holder of its LUN (another node
  // whose reservation key stands still) before it takes the LUN over; 0: never ("off"). A
  // volume's `takeoverAfter` context key wins.
  uint32_t takeover_after = 30;
};

// Fills in the defaults that derive from other options (node id from `host_name`, the CSI
// endpoint, the registration directory, the agent socket, the session bundle directory in
// Kubernetes mode) and checks the result: InvalidArgument, with the flag to fix, for anything
// unusable. Pure: touches nothing.
absl::StatusOr<DaemonOptions> ResolveDaemonOptions(DaemonOptions options,
                                                   std::string_view host_name);

// The CSI socket path of a resolved `csi_endpoint` ("unix:///path" -> "/path").
std::string CsiSocketPath(const DaemonOptions& resolved);

}  // namespace stagehand::agent

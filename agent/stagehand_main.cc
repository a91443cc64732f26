// stagehand: the node storage agent. `stagehand --help` lists the flags.

#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

#include "agent/config_file.h"
#include "agent/daemon.h"
#include "agent/logging.h"
#include "agent/version.h"
#include "base/log.h"
#include "base/process.h"
#include "iscsi/target_spec.h"
#include "session/session_process.h"
#include <CLI/CLI.hpp>

namespace {

// The flags that are not DaemonOptions fields as they are (converted after parsing).
struct Flags {
  std::string mode = "standalone";
  double csi_timeout_seconds = 120;
  double stats_seconds = 60;
  double health_seconds = 5;
  double stall_seconds = 30;
  int watchdog_seconds = 30;
  bool fuse_io_uring = false;
  double resync_seconds = 300;
  double probe_seconds = 30;
  std::string log_format = "auto";
};

// Mode, paths and sockets.
void AddLayoutFlags(CLI::App& app, stagehand::agent::DaemonOptions& o, Flags& f) {
  app.add_option("--mode", f.mode,
                 "standalone: stagehand is the whole stack (plugin watcher, registry); "
                 "kubernetes: kubelet paths, the kubelet finds the driver through its "
                 "registration socket")
      ->check(CLI::IsMember({"standalone", "kubernetes"}))
      ->capture_default_str();
  app.add_option("--kubelet-dir", o.kubelet_dir,
                 "Kubernetes mode: the kubelet's root directory (its --root-dir); the CSI socket, "
                 "the registration directory and the session bundle go under it")
      ->capture_default_str();
  app.add_option("--csi-endpoint", o.csi_endpoint,
                 "CSI endpoint to serve (default unix://<state-dir>/plugins/<driver>/csi.sock; "
                 "kubernetes: unix://<kubelet-dir>/plugins/<driver>/csi.sock)");
  app.add_option("--registration-dir", o.registration_dir,
                 "Plugin registration directory: our <driver>-reg.sock goes here and, standalone, "
                 "every plugin found here is registered (default <state-dir>/plugins_registry; "
                 "kubernetes: <kubelet-dir>/plugins_registry)");
  app.add_option("--kubelet-registration-path", o.kubelet_registration_path,
                 "CSI socket path to advertise in the registration socket when the registering "
                 "side sees it under another path (default: the --csi-endpoint path)");
  app.add_flag("--watch-plugins,!--no-watch-plugins", o.watch_plugins,
               "Standalone: watch the registration directory, register the plugins found there "
               "and reconcile the declared volumes (default on; off = serve the driver only)");
  app.add_option("--manifest-dir", o.manifest_dir,
                 "Standalone: directory of volume manifests (*.yaml), watched")
      ->capture_default_str();
  app.add_option("--agent-socket", o.agent_socket,
                 "Unix socket of the agent API (default <runtime-dir>/agent.sock)");
}

// The metrics endpoint.
void AddMetricsFlags(CLI::App& app, stagehand::agent::DaemonOptions& o) {
  app.add_option("--metrics-address", o.metrics_address,
                 "host:port serving /metrics, /healthz and /readyz (empty: off)")
      ->capture_default_str();
  app.add_option("--metrics-tls-cert", o.metrics_tls.cert_file,
                 "PEM certificate (chain) of the metrics endpoint: serve HTTPS only (with "
                 "--metrics-tls-key)");
  app.add_option("--metrics-tls-key", o.metrics_tls.key_file,
                 "PEM private key of --metrics-tls-cert");
  app.add_option("--metrics-client-ca", o.metrics_tls.client_ca_file,
                 "PEM CA: /metrics answers only clients with a certificate it signed (the probes "
                 "answer anyone)");
}

// Timing, limits, the data path and identity.
void AddBehaviourFlags(CLI::App& app, stagehand::agent::DaemonOptions& o, Flags& f) {
  app.add_option("--csi-timeout", f.csi_timeout_seconds,
                 "Seconds before a CSI call of the reconciler is given up (its outcome is then "
                 "uncertain and the call is repeated)")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  app.add_option("--max-parallel-operations", o.max_parallel_operations,
                 "Operations on different volumes that may run at once")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  AddMetricsFlags(app, o);
  app.add_option("--stats-period", f.stats_seconds,
                 "Seconds between NodeGetVolumeStats rounds over the published volumes (metrics)")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  app.add_option("--health-period", f.health_seconds,
                 "Seconds between NodeGetVolumeHealth rounds over the staged volumes of drivers "
                 "that answer it (0: off; the stats rounds report conditions)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--session-stall-timeout", f.stall_seconds,
                 "Seconds a userspace session may leave I/O waiting without completing any "
                 "before its volume is reported SessionNotAnswering")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  app.add_flag("--fuse-io-uring", f.fuse_io_uring,
               "Userspace sessions take FUSE requests over io_uring where the kernel offers it "
               "(Linux 6.14+, fuse.enable_uring=1): fewer system calls per I/O, but a session "
               "that dies leaves the requests it held waiting, and no upgrade in place");
  app.add_option("--session-watchdog", f.watchdog_seconds,
                 "Seconds a userspace session process may go without answering (stopped, "
                 "deadlocked) before it is killed and a successor takes over its volume's I/O "
                 "(0: never)")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();
  app.add_option("--resync-period", f.resync_seconds,
                 "Seconds between the reconciler's safety-net checks of the mount table")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  app.add_option("--plugin-probe-period", f.probe_seconds,
                 "Seconds between health probes of registered plugins")
      ->check(CLI::Range(0.05, 86400.0))
      ->capture_default_str();
  app.add_option("--driver-name", o.driver_name, "CSI driver name")->capture_default_str();
  app.add_option("--node-id", o.node_id, "Node ID reported by NodeGetInfo (default: host name)");
  app.add_option("--state-dir", o.state_dir, "Persistent state directory")->capture_default_str();
  app.add_option("--runtime-dir", o.runtime_dir, "Runtime directory (session processes)")
      ->capture_default_str();
  app.add_option("--session-launcher", o.session_launcher,
                 "Who runs session processes: systemd (transient units over D-Bus, own cgroup, "
                 "survive restarts of stagehand), detached (children of init), or auto "
                 "(systemd when it answers, else detached)")
      ->check(CLI::IsMember({"auto", "systemd", "detached"}))
      ->capture_default_str();
  app.add_option("--iscsi-transport", o.iscsi_transport,
                 "Default iSCSI transport: kernel (open-iscsi, udev, dm-multipath), userspace "
                 "(libiscsi session processes, FUSE, loop devices), or auto (kernel when the "
                 "kernel has the initiator and iscsid answers, else userspace); a volume's "
                 "'transport' context key wins")
      ->check(CLI::IsMember({"auto", "kernel", "userspace"}))
      ->capture_default_str();
  app.add_option("--systemd-bus-address", o.systemd_bus_address,
                 "D-Bus address of systemd (kubernetes: the host's system bus mounted into the "
                 "pod)")
      ->capture_default_str();
  app.add_option("--session-binary", o.session_binary,
                 "The userspace session binary (default: stagehand-session next to stagehand, "
                 "else stagehand itself); sessions of another build are replaced by it in place");
  app.add_option(
      "--session-bundle-dir", o.session_bundle_dir,
      "Host directory for a relocatable copy of the session binary and its libraries, "
      "run by the host's systemd; must not be mounted noexec (default in kubernetes mode: "
      "<kubelet-dir>/plugins/<driver>/bin)");
  app.add_option("--initiator-name", o.initiator_name,
                 "iSCSI initiator name (default: /etc/iscsi/initiatorname.iscsi, else generated "
                 "once and kept in the state dir)");
  app.add_option("--max-volumes-per-node", o.max_volumes_per_node,
                 "Reported by NodeGetInfo and enforced by NodeStageVolume; 0 = unlimited")
      ->capture_default_str();
  app.add_option("--replacement-timeout", o.replacement_timeout,
                 "Seconds I/O waits for a lost iSCSI connection to come back before it fails "
                 "with EIO while reconnects go on (userspace transport; like open-iscsi's "
                 "node.session.timeo.replacement_timeout); a volume's replacementTimeout wins")
      ->check(CLI::Range(1u, 86400u))
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--takeover-after",
         [&o](const std::string& text) {
           o.takeover_after = stagehand::iscsi::ParseTakeoverAfter(text, "--takeover-after")
                                  .value_or(o.takeover_after);
         },
         "Seconds another node's reservation of a single-node volume's LUN must stand still "
         "(its key unrenewed: a dead node) before a stage here takes the LUN over, or off; at "
         "least 3; a volume's takeoverAfter wins (default: 30)")
      ->check([](const std::string& text) {
        auto parsed = stagehand::iscsi::ParseTakeoverAfter(text, "--takeover-after");
        return parsed.ok() ? std::string() : std::string(parsed.status().message());
      });
}

void AddLoggingFlags(CLI::App& app, stagehand::agent::DaemonOptions& o, Flags& f) {
  app.add_option("--log-level", o.log_level,
                 "trace, debug, info, warn, error; per component after it, e.g. "
                 "info,reconciler=debug,registration=warn (components: agent, csi, manifests, "
                 "metrics, reconciler, registration, sessions)")
      ->check([](const std::string& spec) {
        // Checked without applying: logging is set up after parsing.
        auto s = stagehand::CheckLogLevels(spec);
        return s.ok() ? std::string() : std::string(s.message());
      })
      ->capture_default_str();
  app.add_option("--log-format", f.log_format,
                 "auto (journald fields when run by systemd, else text), text, json, journal")
      ->check(CLI::IsMember({"auto", "text", "json", "journal"}))
      ->capture_default_str();
}

}  // namespace

// CLI11 reports bad flags by exception inside CLI11_PARSE (caught there); anything else ends the
// process, as it should.
// NOLINTNEXTLINE(bugprone-exception-escape)
int main(int argc, char** argv) {
  // The agent receives CHAP secrets in NodeStageVolume: no core dump may carry them.
  stagehand::NeverDumpCore();
  // Internal role: a userspace iSCSI session process started by the transport (stdin/stdout).
  if (argc >= 2 && std::strcmp(argv[1], "__session") == 0) {
    return stagehand::session::SessionMain(std::vector<std::string>(argv + 2, argv + argc));
  }
  // One malloc arena, set before any thread starts. The agent's threads mostly wait; with
  // glibc's default (up to eight arenas per core) each thread that allocated kept an arena of
  // its own, partly free: 1000 declared volumes held 16-25 MB of anonymous memory instead of
  // 10 (bench/README.md, reconciler benchmark).
  (void)mallopt(M_ARENA_MAX, 1);  // NOLINT(concurrency-mt-unsafe): no other thread yet.
  stagehand::agent::DaemonOptions o;
  CLI::App app{"stagehand: node storage agent with a built-in iSCSI CSI node plugin"};
  app.set_version_flag("--version", std::string(stagehand::agent::kVersion));
  Flags f;
  AddLayoutFlags(app, o, f);
  AddBehaviourFlags(app, o, f);
  AddLoggingFlags(app, o, f);
  // Every flag above may also come from the config file; flags win.
  app.set_config("--config", "/etc/stagehand/config.yaml",
                 "YAML config file: flag names without dashes as keys (ignored when the default "
                 "does not exist)");
  app.config_formatter(std::make_shared<stagehand::agent::YamlConfig>(
      stagehand::agent::LongOptionNames(app, {"config"})));
  std::vector<std::string> args = stagehand::agent::SplitEmptyAssignments(argc, argv);
  std::vector<char*> raw;
  for (std::string& a : args) {
    raw.push_back(a.data());
  }
  CLI11_PARSE(app, static_cast<int>(raw.size()), raw.data());
  o.mode = f.mode == "kubernetes" ? stagehand::agent::Mode::kKubernetes
                                  : stagehand::agent::Mode::kStandalone;
  o.csi_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.csi_timeout_seconds * 1000.0));
  o.resync_period = std::chrono::milliseconds(static_cast<int64_t>(f.resync_seconds * 1000.0));
  o.stats_period = std::chrono::milliseconds(static_cast<int64_t>(f.stats_seconds * 1000.0));
  o.health_period = std::chrono::milliseconds(static_cast<int64_t>(f.health_seconds * 1000.0));
  o.session_stall_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(f.stall_seconds * 1000.0));
  o.session_watchdog = std::chrono::seconds(f.watchdog_seconds);
  o.fuse_io_uring = f.fuse_io_uring;
  o.plugin_probe_period = std::chrono::milliseconds(static_cast<int64_t>(f.probe_seconds * 1000.0));
  // Logs go to stderr or the journal; stdout stays free for tools.
  if (auto s = stagehand::agent::SetUpLogging(f.log_format, o.log_level); !s.ok()) {
    std::fprintf(stderr, "--log-level: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto daemon = stagehand::agent::Daemon::Create(std::move(o));
  if (!daemon.ok()) {
    stagehand::Log(stagehand::LogComponent::kAgent).error("startup failed: {}", daemon.status());
    return stagehand::agent::ExitCode(daemon.status());
  }
  const absl::Status run = (*daemon)->Run();
  if (!run.ok()) {
    stagehand::Log(stagehand::LogComponent::kAgent).error("{}", run);
  }
  return stagehand::agent::ExitCode(run);
}

#include "agent/daemon_options.h"

#include <absl/strings/str_cat.h>

#include "agent/node_id.h"
#include "base/paths.h"
#include "registration/plugin_info_validation.h"

namespace stagehand::agent {
namespace {

absl::Status CheckCleanAbsolute(absl::string_view flag, const std::string& path) {
  if (!IsCleanAbsolutePath(path)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path, "' must be an absolute, normalised path"));
  }
  return absl::OkStatus();
}

absl::Status CheckOneOf(absl::string_view flag, const std::string& value,
                        std::initializer_list<absl::string_view> choices) {
  for (absl::string_view choice : choices) {
    if (value == choice) {
      return absl::OkStatus();
    }
  }
  std::string list;
  for (absl::string_view choice : choices) {
    absl::StrAppend(&list, list.empty() ? "" : ", ", choice);
  }
  return absl::InvalidArgumentError(absl::StrCat(flag, " '", value, "' is not one of: ", list));
}

}  // namespace

absl::StatusOr<DaemonOptions> ResolveDaemonOptions(DaemonOptions options,
                                                   std::string_view host_name) {
  const bool kubernetes = options.mode == Mode::kKubernetes;
  if (options.node_id.empty()) {
    options.node_id = std::string(host_name);
  }
  SH_RETURN_IF_ERROR(ValidateNodeId(options.node_id, kubernetes));
  SH_RETURN_IF_ERROR(status::ValidateMetricsTls(options.metrics_tls));
  if (options.metrics_tls.enabled() && options.metrics_address.empty()) {
    return absl::InvalidArgumentError(
        "--metrics-tls-cert is set but --metrics-address is empty (metrics off)");
  }
  if (kubernetes) {
    SH_RETURN_IF_ERROR(CheckCleanAbsolute("--kubelet-dir", options.kubelet_dir));
    options.watch_plugins = false;  // The kubelet is the watcher.
  }
  // The kubelet's layout under its root directory, or the same layout under ours.
  const std::string plugins_root = kubernetes ? options.kubelet_dir : options.state_dir;
  const std::string driver_dir =
      JoinPath(plugins_root, absl::StrCat("plugins/", options.driver_name));
  if (options.csi_endpoint.empty()) {
    options.csi_endpoint = absl::StrCat("unix://", JoinPath(driver_dir, "csi.sock"));
  }
  if (auto socket = registration::EndpointSocketPath(options.csi_endpoint); !socket.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--csi-endpoint: ", socket.status().message(),
                                                   " (use unix:///absolute/path)"));
  }
  if (options.registration_dir.empty()) {
    options.registration_dir = JoinPath(plugins_root, "plugins_registry");
  }
  SH_RETURN_IF_ERROR(CheckCleanAbsolute("--registration-dir", options.registration_dir));
  if (options.agent_socket.empty()) {
    options.agent_socket = JoinPath(options.runtime_dir, "agent.sock");
  }
  // Each socket needs a path of its own: one would replace the other, and their locks (which
  // never conflict within one process) would not notice.
  const std::string csi_socket = *registration::EndpointSocketPath(options.csi_endpoint);
  const std::string registration_socket =
      JoinPath(options.registration_dir, absl::StrCat(options.driver_name, "-reg.sock"));
  if (options.agent_socket == csi_socket || options.agent_socket == registration_socket) {
    return absl::InvalidArgumentError(
        absl::StrCat("--agent-socket '", options.agent_socket,
                     "' is also the CSI or the registration socket; give it a path of its own"));
  }
  if (registration_socket == csi_socket) {
    return absl::InvalidArgumentError(
        absl::StrCat("--registration-dir: the registration socket '", registration_socket,
                     "' would be the CSI socket (--csi-endpoint); use another directory"));
  }
  if (options.session_bundle_dir.empty() && kubernetes) {
    // Not under /run: many distributions mount it noexec. The kubelet's plugin directory is a
    // host path the pod mounts at the same place, and executable.
    options.session_bundle_dir = JoinPath(driver_dir, "bin");
  }
  SH_RETURN_IF_ERROR(
      CheckOneOf("--session-launcher", options.session_launcher, {"auto", "systemd", "detached"}));
  SH_RETURN_IF_ERROR(
      CheckOneOf("--iscsi-transport", options.iscsi_transport, {"auto", "kernel", "userspace"}));
  return options;
}

std::string CsiSocketPath(const DaemonOptions& resolved) {
  auto socket = registration::EndpointSocketPath(resolved.csi_endpoint);
  return socket.ok() ? *socket : std::string();
}

}  // namespace stagehand::agent

#pragma once

// Blocking client calls the watcher makes during a handshake and health probes, each bounded by
// a deadline and cancellable through a stop token (a socket that disappears mid-handshake).

#include <chrono>
#include <memory>
#include <stop_token>
#include <string>

#include <grpcpp/channel.h>

#include "base/status.h"
#include "proto/pluginregistration.pb.h"
#include "proto/state.pb.h"

namespace stagehand::registration {

struct CallTimeouts {
  std::chrono::milliseconds dial{std::chrono::seconds(10)};
  std::chrono::milliseconds get_info{std::chrono::seconds(1)};
  std::chrono::milliseconds notify{std::chrono::seconds(5)};
  std::chrono::milliseconds call{std::chrono::seconds(10)};  // Probe, GetPluginInfo, NodeGet*.
};

// A channel to the unix socket `path` that reconnects quickly, and waits until it is connected
// (at most `timeout`). Unavailable when it does not connect in time.
absl::StatusOr<std::shared_ptr<grpc::Channel>> DialUnix(const std::string& path,
                                                        std::chrono::milliseconds timeout);

// pluginregistration.Registration/GetInfo over `channel`.
absl::StatusOr<pluginregistration::PluginInfo> GetInfo(
    const std::shared_ptr<grpc::Channel>& channel, std::chrono::milliseconds timeout,
    const std::stop_token& token);

// pluginregistration.Registration/NotifyRegistrationStatus over `channel`.
absl::Status NotifyRegistrationStatus(const std::shared_ptr<grpc::Channel>& channel,
                                      bool registered, const std::string& error,
                                      std::chrono::milliseconds timeout,
                                      const std::stop_token& token);

// csi.v1.Identity/Probe: OK when the plugin answers and does not report ready=false.
absl::Status ProbePlugin(const std::shared_ptr<grpc::Channel>& channel,
                         std::chrono::milliseconds timeout, const std::stop_token& token);

// Fills the CSI facts of `plugin` from its endpoint: Probe, GetPluginInfo (the name must equal
// plugin.name()), NodeGetCapabilities and NodeGetInfo (a node id is required).
absl::Status QueryDriver(const std::shared_ptr<grpc::Channel>& channel,
                         const CallTimeouts& timeouts, const std::stop_token& token,
                         state::v1::RegisteredPlugin& plugin);

}  // namespace stagehand::registration

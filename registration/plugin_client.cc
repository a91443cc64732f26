#include "registration/plugin_client.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>

#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>

#include "base/unique_fd.h"
#include "proto/csi.grpc.pb.h"
#include "proto/grpc_status.h"
#include "proto/pluginregistration.grpc.pb.h"

namespace stagehand::registration {
namespace {

// Runs `call` with a fresh context that expires after `timeout` and is cancelled by `token`.
template <typename Call>
grpc::Status Bounded(std::chrono::milliseconds timeout, const std::stop_token& token, Call&& call) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  std::stop_callback cancel(token, [&context] { context.TryCancel(); });
  return call(context);
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> DialUnix(const std::string& path,
                                                        std::chrono::milliseconds timeout) {
  grpc::ChannelArguments args;
  // gRPC's default first reconnect backoff is 1 s; a plugin that just bound its socket is
  // usually listening a few milliseconds later. Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC
  // reads it as the shortest time one connection attempt is given (20 s by default), and a
  // plugin on a loaded node may take longer than that to send its first frame.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(absl::StrCat("unix:", path),
                                           grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + timeout)) {
    return absl::UnavailableError(
        absl::StrCat("could not connect to '", path, "' within ", timeout.count(), " ms"));
  }
  return channel;
}

absl::StatusOr<pluginregistration::PluginInfo> GetInfo(
    const std::shared_ptr<grpc::Channel>& channel, std::chrono::milliseconds timeout,
    const std::stop_token& token) {
  pluginregistration::Registration::Stub stub(channel);
  pluginregistration::PluginInfo info;
  const grpc::Status s = Bounded(timeout, token, [&](grpc::ClientContext& context) {
    return stub.GetInfo(&context, pluginregistration::InfoRequest(), &info);
  });
  SH_RETURN_IF_ERROR(FromGrpcStatus(s, "GetInfo"));
  return info;
}

absl::Status NotifyRegistrationStatus(const std::shared_ptr<grpc::Channel>& channel,
                                      bool registered, const std::string& error,
                                      std::chrono::milliseconds timeout,
                                      const std::stop_token& token) {
  pluginregistration::Registration::Stub stub(channel);
  pluginregistration::RegistrationStatus request;
  request.set_plugin_registered(registered);
  request.set_error(error);
  pluginregistration::RegistrationStatusResponse response;
  const grpc::Status s = Bounded(timeout, token, [&](grpc::ClientContext& context) {
    return stub.NotifyRegistrationStatus(&context, request, &response);
  });
  return FromGrpcStatus(s, "NotifyRegistrationStatus");
}

absl::Status ProbePlugin(const std::shared_ptr<grpc::Channel>& channel,
                         std::chrono::milliseconds timeout, const std::stop_token& token) {
  csi::v1::Identity::Stub identity(channel);
  csi::v1::ProbeResponse probe;
  const grpc::Status s = Bounded(timeout, token, [&](grpc::ClientContext& context) {
    return identity.Probe(&context, csi::v1::ProbeRequest(), &probe);
  });
  SH_RETURN_IF_ERROR(FromGrpcStatus(s, "Probe"));
  if (probe.has_ready() && !probe.ready().value()) {
    return absl::UnavailableError("Probe: the plugin reports that it is not ready");
  }
  return absl::OkStatus();
}

absl::Status QueryDriver(const std::shared_ptr<grpc::Channel>& channel,
                         const CallTimeouts& timeouts, const std::stop_token& token,
                         state::v1::RegisteredPlugin& plugin) {
  SH_RETURN_IF_ERROR(ProbePlugin(channel, timeouts.call, token));

  csi::v1::Identity::Stub identity(channel);
  csi::v1::GetPluginInfoResponse info;
  SH_RETURN_IF_ERROR(FromGrpcStatus(Bounded(timeouts.call, token,
                                            [&](grpc::ClientContext& context) {
                                              return identity.GetPluginInfo(
                                                  &context, csi::v1::GetPluginInfoRequest(), &info);
                                            }),
                                    "GetPluginInfo"));
  if (info.name() != plugin.name()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the registration socket names the driver '", plugin.name(),
        "' but its endpoint's GetPluginInfo says '", info.name(), "'; they must agree"));
  }
  plugin.set_vendor_version(info.vendor_version());

  csi::v1::Node::Stub node(channel);
  csi::v1::NodeGetCapabilitiesResponse capabilities;
  SH_RETURN_IF_ERROR(FromGrpcStatus(Bounded(timeouts.call, token,
                                            [&](grpc::ClientContext& context) {
                                              return node.NodeGetCapabilities(
                                                  &context, csi::v1::NodeGetCapabilitiesRequest(),
                                                  &capabilities);
                                            }),
                                    "NodeGetCapabilities"));
  plugin.clear_node_capabilities();
  for (const auto& capability : capabilities.capabilities()) {
    if (capability.has_rpc()) {
      plugin.add_node_capabilities(
          csi::v1::NodeServiceCapability::RPC::Type_Name(capability.rpc().type()));
    }
  }

  csi::v1::NodeGetInfoResponse node_info;
  SH_RETURN_IF_ERROR(FromGrpcStatus(
      Bounded(timeouts.call, token,
              [&](grpc::ClientContext& context) {
                return node.NodeGetInfo(&context, csi::v1::NodeGetInfoRequest(), &node_info);
              }),
      "NodeGetInfo"));
  if (node_info.node_id().empty()) {
    return absl::InvalidArgumentError("NodeGetInfo returned an empty node_id");
  }
  plugin.set_node_id(node_info.node_id());
  plugin.set_max_volumes_per_node(node_info.max_volumes_per_node());
  plugin.clear_topology();
  if (node_info.has_accessible_topology()) {
    for (const auto& [key, value] : node_info.accessible_topology().segments()) {
      (*plugin.mutable_topology())[key] = value;
    }
  }
  return absl::OkStatus();
}

}  // namespace stagehand::registration

#pragma once

#include <string>

#include "proto/csi.grpc.pb.h"

namespace stagehand::driver {

// CSI Identity of the built-in driver. Thread-safe (stateless).
class IdentityService final : public csi::v1::Identity::Service {
 public:
  IdentityService(std::string name, std::string version)
      : name_(std::move(name)), version_(std::move(version)) {}

  grpc::Status GetPluginInfo(grpc::ServerContext*, const csi::v1::GetPluginInfoRequest*,
                             csi::v1::GetPluginInfoResponse* resp) override {
    resp->set_name(name_);
    resp->set_vendor_version(version_);
    return grpc::Status::OK;
  }

  // A node-only plugin: no controller service, no accessibility constraints.
  grpc::Status GetPluginCapabilities(grpc::ServerContext*,
                                     const csi::v1::GetPluginCapabilitiesRequest*,
                                     csi::v1::GetPluginCapabilitiesResponse*) override {
    return grpc::Status::OK;
  }

  grpc::Status Probe(grpc::ServerContext*, const csi::v1::ProbeRequest*,
                     csi::v1::ProbeResponse* resp) override {
    resp->mutable_ready()->set_value(true);
    return grpc::Status::OK;
  }

 private:
  std::string name_;
  std::string version_;
};

}  // namespace stagehand::driver

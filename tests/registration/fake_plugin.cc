#include "tests/registration/fake_plugin.h"

#include <unistd.h>

#include <chrono>

#include <grpcpp/grpcpp.h>

#include "proto/csi.grpc.pb.h"
#include "proto/pluginregistration.grpc.pb.h"

namespace stagehand::testing {

class FakePlugin::RegistrationService final : public pluginregistration::Registration::Service {
 public:
  explicit RegistrationService(FakePlugin& owner) : owner_(owner) {}

  grpc::Status GetInfo(grpc::ServerContext*, const pluginregistration::InfoRequest*,
                       pluginregistration::PluginInfo* info) override {
    *info = owner_.info_;
    return grpc::Status::OK;
  }

  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*,
                                        const pluginregistration::RegistrationStatus* status,
                                        pluginregistration::RegistrationStatusResponse*) override {
    std::lock_guard lock(owner_.mu_);
    owner_.notifications_.push_back({status->plugin_registered(), status->error()});
    owner_.cv_.notify_all();
    return grpc::Status::OK;
  }

 private:
  FakePlugin& owner_;
};

class FakePlugin::IdentityService final : public csi::v1::Identity::Service {
 public:
  explicit IdentityService(FakePlugin& owner) : owner_(owner) {}

  grpc::Status GetPluginInfo(grpc::ServerContext*, const csi::v1::GetPluginInfoRequest*,
                             csi::v1::GetPluginInfoResponse* response) override {
    response->set_name(owner_.info_.name());
    response->set_vendor_version("fake-1");
    return grpc::Status::OK;
  }

  grpc::Status Probe(grpc::ServerContext*, const csi::v1::ProbeRequest*,
                     csi::v1::ProbeResponse* response) override {
    std::lock_guard lock(owner_.mu_);
    response->mutable_ready()->set_value(owner_.ready_);
    return grpc::Status::OK;
  }

 private:
  FakePlugin& owner_;
};

class FakePlugin::NodeService final : public csi::v1::Node::Service {
 public:
  explicit NodeService(FakePlugin& owner) : owner_(owner) {}

  grpc::Status NodeGetCapabilities(grpc::ServerContext*, const csi::v1::NodeGetCapabilitiesRequest*,
                                   csi::v1::NodeGetCapabilitiesResponse* response) override {
    response->add_capabilities()->mutable_rpc()->set_type(
        csi::v1::NodeServiceCapability::RPC::STAGE_UNSTAGE_VOLUME);
    return grpc::Status::OK;
  }

  grpc::Status NodeGetInfo(grpc::ServerContext*, const csi::v1::NodeGetInfoRequest*,
                           csi::v1::NodeGetInfoResponse* response) override {
    std::unique_lock lock(owner_.mu_);
    owner_.entered_ = true;
    owner_.cv_.notify_all();
    owner_.cv_.wait(lock, [this] { return !owner_.block_; });
    response->set_node_id("fake-node");
    response->set_max_volumes_per_node(7);
    (*response->mutable_accessible_topology()->mutable_segments())["topology.fake/zone"] = "z1";
    return grpc::Status::OK;
  }

 private:
  FakePlugin& owner_;
};

FakePlugin::FakePlugin(std::string dir, std::string endpoint_dir, std::string file,
                       std::string name)
    : dir_(std::move(dir)),
      endpoint_dir_(std::move(endpoint_dir)),
      file_(std::move(file)),
      registration_service_(std::make_unique<RegistrationService>(*this)),
      identity_service_(std::make_unique<IdentityService>(*this)),
      node_service_(std::make_unique<NodeService>(*this)) {
  info_.set_type("CSIPlugin");
  info_.set_name(std::move(name));
  info_.set_endpoint(endpoint_path());
  info_.add_supported_versions("1.0.0");
}

FakePlugin::~FakePlugin() {
  Release();
  RemoveRegistration();
  StopEndpoint();
}

namespace {

std::unique_ptr<grpc::Server> Serve(const std::string& path,
                                    const std::vector<grpc::Service*>& services) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials());
  for (auto* service : services) {
    builder.RegisterService(service);
  }
  return builder.BuildAndStart();
}

void Shutdown(std::unique_ptr<grpc::Server>& server) {
  if (server) {
    server->Shutdown(std::chrono::system_clock::now());
    server->Wait();
    server.reset();
  }
}

}  // namespace

absl::Status FakePlugin::ServeEndpoint() {
  endpoint_server_ = Serve(endpoint_path(), {identity_service_.get(), node_service_.get()});
  return endpoint_server_ ? absl::OkStatus() : absl::UnavailableError("cannot serve endpoint");
}

absl::Status FakePlugin::ServeRegistration() {
  registration_server_ = Serve(registration_path(), {registration_service_.get()});
  return registration_server_ ? absl::OkStatus()
                              : absl::UnavailableError("cannot serve registration socket");
}

void FakePlugin::RemoveRegistration() {
  (void)unlink(registration_path().c_str());
  Shutdown(registration_server_);
}

void FakePlugin::StopEndpoint() {
  Shutdown(endpoint_server_);
  (void)unlink(endpoint_path().c_str());
}

void FakePlugin::SetReady(bool ready) {
  std::lock_guard lock(mu_);
  ready_ = ready;
}

void FakePlugin::BlockNodeGetInfo() {
  std::lock_guard lock(mu_);
  block_ = true;
}

void FakePlugin::Release() {
  std::lock_guard lock(mu_);
  block_ = false;
  cv_.notify_all();
}

bool FakePlugin::WaitNodeGetInfoEntered(int seconds) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return entered_; });
}

std::vector<Notification> FakePlugin::WaitNotifications(size_t count, int seconds) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::seconds(seconds),
               [this, count] { return notifications_.size() >= count; });
  return notifications_;
}

std::vector<Notification> FakePlugin::notifications() {
  std::lock_guard lock(mu_);
  return notifications_;
}

}  // namespace stagehand::testing

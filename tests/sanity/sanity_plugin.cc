#include "tests/sanity/sanity_plugin.h"

#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <mutex>

#include <absl/strings/str_cat.h>

#include "proto/csi.grpc.pb.h"
#include "testbed/stagehand_daemon.h"
#include "tests/sanity/csi_controller.grpc.pb.h"

namespace stagehand::testing {
namespace {

constexpr int64_t kDefaultVolumeBytes = 128ll << 20;
constexpr int kLun = 1;

struct Volume {
  std::string name;
  int tid = 0;
  std::string file;
  int64_t bytes = 0;
  std::map<std::string, std::string> context;
};

grpc::Status Invalid(const std::string& message) {
  return {grpc::StatusCode::INVALID_ARGUMENT, message};
}

grpc::Status Internal(const absl::Status& s) {
  return {grpc::StatusCode::INTERNAL, std::string(s.message())};
}

// Runs one call on stagehand with a fresh client context.
grpc::Status CallNode(const std::function<grpc::Status(grpc::ClientContext*)>& call) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  return call(&ctx);
}

}  // namespace

class SanityPlugin::Impl final : public csi::v1::Controller::Service,
                                 public csi::v1::Node::Service,
                                 public csi::v1::Identity::Service {
 public:
  explicit Impl(SanityPluginOptions options)
      : options_(std::move(options)),
        channel_(grpc::CreateChannel(options_.node_endpoint, grpc::InsecureChannelCredentials())),
        node_(csi::v1::Node::NewStub(channel_)),
        identity_(csi::v1::Identity::NewStub(channel_)),
        next_tid_(options_.first_tid) {}

  int LiveVolumes() const {
    std::lock_guard lock(mu_);
    return static_cast<int>(volumes_.size());
  }

  int SucceededNodeCalls(const std::string& method) const {
    std::lock_guard lock(mu_);
    auto it = succeeded_.find(method);
    return it == succeeded_.end() ? 0 : it->second;
  }

  // ----- Controller: LUNs on the test's tgtd -----

  grpc::Status ControllerGetCapabilities(
      grpc::ServerContext*, const csi::v1::ControllerGetCapabilitiesRequest*,
      csi::v1::ControllerGetCapabilitiesResponse* resp) override {
    using Rpc = csi::v1::ControllerServiceCapability::RPC;
    for (auto type : {Rpc::CREATE_DELETE_VOLUME, Rpc::EXPAND_VOLUME}) {
      resp->add_capabilities()->mutable_rpc()->set_type(type);
    }
    return grpc::Status::OK;
  }

  grpc::Status CreateVolume(grpc::ServerContext*, const csi::v1::CreateVolumeRequest* req,
                            csi::v1::CreateVolumeResponse* resp) override {
    if (req->name().empty()) {
      return Invalid("name is required");
    }
    if (req->volume_capabilities().empty()) {
      return Invalid("volume_capabilities is required");
    }
    const int64_t bytes = req->capacity_range().required_bytes() > 0
                              ? req->capacity_range().required_bytes()
                              : kDefaultVolumeBytes;
    if (req->capacity_range().limit_bytes() > 0 && req->capacity_range().limit_bytes() < bytes) {
      return {grpc::StatusCode::OUT_OF_RANGE, "limit_bytes is below required_bytes"};
    }
    std::lock_guard lock(mu_);
    for (const auto& [id, v] : volumes_) {
      if (v.name == req->name()) {
        if (v.bytes != bytes) {
          return {grpc::StatusCode::ALREADY_EXISTS,
                  absl::StrCat("volume '", v.name, "' exists with another size")};
        }
        Describe(id, v, resp->mutable_volume());
        return grpc::Status::OK;
      }
    }
    Volume v;
    v.name = req->name();
    v.tid = next_tid_++;
    v.bytes = bytes;
    v.file = absl::StrCat(options_.lun_dir, "/lun-", v.tid, ".img");
    const std::string iqn = absl::StrCat("iqn.2026-12.dev.stagehand.sanity:", v.tid);
    if (auto s = testbed::MakeSparseFile(v.file, static_cast<uint64_t>(bytes)); !s.ok()) {
      return Internal(s);
    }
    if (auto s = options_.tgtd->AddTarget(v.tid, iqn); !s.ok()) {
      unlink(v.file.c_str());
      return Internal(s);
    }
    if (auto s = options_.tgtd->AddLun(v.tid, kLun, v.file); !s.ok()) {
      (void)options_.tgtd->DeleteTarget(v.tid);
      unlink(v.file.c_str());
      return Internal(s);
    }
    v.context = {
        {"targetPortal", options_.tgtd->portal()}, {"iqn", iqn}, {"lun", std::to_string(kLun)}};
    const std::string id = absl::StrCat("sanity-", v.tid);
    Describe(id, v, resp->mutable_volume());
    volumes_.emplace(id, std::move(v));
    return grpc::Status::OK;
  }

  grpc::Status DeleteVolume(grpc::ServerContext*, const csi::v1::DeleteVolumeRequest* req,
                            csi::v1::DeleteVolumeResponse*) override {
    if (req->volume_id().empty()) {
      return Invalid("volume_id is required");
    }
    std::lock_guard lock(mu_);
    auto it = volumes_.find(req->volume_id());
    if (it == volumes_.end()) {
      return grpc::Status::OK;  // Deleted already (CSI: idempotent).
    }
    if (auto s = options_.tgtd->DeleteTarget(it->second.tid); !s.ok()) {
      return Internal(s);
    }
    unlink(it->second.file.c_str());
    volumes_.erase(it);
    return grpc::Status::OK;
  }

  // Grows the backing file, then has tgtd re-read the LUN: tgtd reads a LUN's size only when
  // the LUN is added, so it is removed and added again (same target, number and backing file,
  // hence the same identity).
  grpc::Status ControllerExpandVolume(grpc::ServerContext*,
                                      const csi::v1::ControllerExpandVolumeRequest* req,
                                      csi::v1::ControllerExpandVolumeResponse* resp) override {
    if (req->volume_id().empty()) {
      return Invalid("volume_id is required");
    }
    if (!req->has_capacity_range()) {
      return Invalid("capacity_range is required");
    }
    std::lock_guard lock(mu_);
    auto it = volumes_.find(req->volume_id());
    if (it == volumes_.end()) {
      return {grpc::StatusCode::NOT_FOUND, absl::StrCat("no volume '", req->volume_id(), "'")};
    }
    Volume& v = it->second;
    const int64_t wanted = req->capacity_range().required_bytes();
    if (wanted > v.bytes) {
      if (truncate(v.file.c_str(), wanted) != 0) {
        return Internal(absl::ErrnoToStatus(errno, "truncate"));
      }
      if (auto s = options_.tgtd->RemoveLun(v.tid, kLun); !s.ok()) {
        return Internal(s);
      }
      if (auto s = options_.tgtd->AddLun(v.tid, kLun, v.file); !s.ok()) {
        return Internal(s);
      }
      v.bytes = wanted;
    }
    resp->set_capacity_bytes(v.bytes);
    resp->set_node_expansion_required(true);
    return grpc::Status::OK;
  }

  // ----- Identity: stagehand's, plus the controller -----

  grpc::Status GetPluginInfo(grpc::ServerContext*, const csi::v1::GetPluginInfoRequest* req,
                             csi::v1::GetPluginInfoResponse* resp) override {
    return CallNode(
        [&](grpc::ClientContext* c) { return identity_->GetPluginInfo(c, *req, resp); });
  }

  grpc::Status GetPluginCapabilities(grpc::ServerContext*,
                                     const csi::v1::GetPluginCapabilitiesRequest* req,
                                     csi::v1::GetPluginCapabilitiesResponse* resp) override {
    grpc::Status s = CallNode(
        [&](grpc::ClientContext* c) { return identity_->GetPluginCapabilities(c, *req, resp); });
    if (s.ok()) {
      resp->add_capabilities()->mutable_service()->set_type(
          csi::v1::PluginCapability::Service::CONTROLLER_SERVICE);
    }
    return s;
  }

  grpc::Status Probe(grpc::ServerContext*, const csi::v1::ProbeRequest* req,
                     csi::v1::ProbeResponse* resp) override {
    return CallNode([&](grpc::ClientContext* c) { return identity_->Probe(c, *req, resp); });
  }

  // ----- Node: passed to stagehand unchanged -----

  grpc::Status NodeStageVolume(grpc::ServerContext*, const csi::v1::NodeStageVolumeRequest* req,
                               csi::v1::NodeStageVolumeResponse* resp) override {
    return Forward("NodeStageVolume",
                   [&](grpc::ClientContext* c) { return node_->NodeStageVolume(c, *req, resp); });
  }

  grpc::Status NodeUnstageVolume(grpc::ServerContext*, const csi::v1::NodeUnstageVolumeRequest* req,
                                 csi::v1::NodeUnstageVolumeResponse* resp) override {
    return Forward("NodeUnstageVolume",
                   [&](grpc::ClientContext* c) { return node_->NodeUnstageVolume(c, *req, resp); });
  }

  grpc::Status NodePublishVolume(grpc::ServerContext*, const csi::v1::NodePublishVolumeRequest* req,
                                 csi::v1::NodePublishVolumeResponse* resp) override {
    return Forward("NodePublishVolume",
                   [&](grpc::ClientContext* c) { return node_->NodePublishVolume(c, *req, resp); });
  }

  grpc::Status NodeUnpublishVolume(grpc::ServerContext*,
                                   const csi::v1::NodeUnpublishVolumeRequest* req,
                                   csi::v1::NodeUnpublishVolumeResponse* resp) override {
    return Forward("NodeUnpublishVolume", [&](grpc::ClientContext* c) {
      return node_->NodeUnpublishVolume(c, *req, resp);
    });
  }

  grpc::Status NodeGetVolumeHealth(grpc::ServerContext*,
                                   const csi::v1::NodeGetVolumeHealthRequest* req,
                                   csi::v1::NodeGetVolumeHealthResponse* resp) override {
    return Forward("NodeGetVolumeHealth", [&](grpc::ClientContext* c) {
      return node_->NodeGetVolumeHealth(c, *req, resp);
    });
  }

  grpc::Status NodeGetStorageHealth(grpc::ServerContext*,
                                    const csi::v1::NodeGetStorageHealthRequest* req,
                                    csi::v1::NodeGetStorageHealthResponse* resp) override {
    return Forward("NodeGetStorageHealth", [&](grpc::ClientContext* c) {
      return node_->NodeGetStorageHealth(c, *req, resp);
    });
  }

  grpc::Status NodeGetVolumeStats(grpc::ServerContext*,
                                  const csi::v1::NodeGetVolumeStatsRequest* req,
                                  csi::v1::NodeGetVolumeStatsResponse* resp) override {
    return Forward("NodeGetVolumeStats", [&](grpc::ClientContext* c) {
      return node_->NodeGetVolumeStats(c, *req, resp);
    });
  }

  grpc::Status NodeExpandVolume(grpc::ServerContext*, const csi::v1::NodeExpandVolumeRequest* req,
                                csi::v1::NodeExpandVolumeResponse* resp) override {
    return Forward("NodeExpandVolume",
                   [&](grpc::ClientContext* c) { return node_->NodeExpandVolume(c, *req, resp); });
  }

  grpc::Status NodeGetCapabilities(grpc::ServerContext*,
                                   const csi::v1::NodeGetCapabilitiesRequest* req,
                                   csi::v1::NodeGetCapabilitiesResponse* resp) override {
    return Forward("NodeGetCapabilities", [&](grpc::ClientContext* c) {
      return node_->NodeGetCapabilities(c, *req, resp);
    });
  }

  grpc::Status NodeGetInfo(grpc::ServerContext*, const csi::v1::NodeGetInfoRequest* req,
                           csi::v1::NodeGetInfoResponse* resp) override {
    return Forward("NodeGetInfo",
                   [&](grpc::ClientContext* c) { return node_->NodeGetInfo(c, *req, resp); });
  }

 private:
  // Passes one Node call to stagehand and counts its successes.
  grpc::Status Forward(const std::string& method,
                       const std::function<grpc::Status(grpc::ClientContext*)>& call) {
    grpc::Status s = CallNode(call);
    if (s.ok()) {
      std::lock_guard lock(mu_);
      ++succeeded_[method];
    }
    return s;
  }

  static void Describe(const std::string& id, const Volume& v, csi::v1::Volume* out) {
    out->set_volume_id(id);
    out->set_capacity_bytes(v.bytes);
    out->mutable_volume_context()->insert(v.context.begin(), v.context.end());
  }

  const SanityPluginOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<csi::v1::Node::Stub> node_;
  std::unique_ptr<csi::v1::Identity::Stub> identity_;
  mutable std::mutex mu_;
  int next_tid_;                           // Guarded by mu_.
  std::map<std::string, Volume> volumes_;  // By volume id; guarded by mu_.
  std::map<std::string, int> succeeded_;   // Node calls answered OK, by method; guarded by mu_.
};

SanityPlugin::SanityPlugin(SanityPluginOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

SanityPlugin::~SanityPlugin() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }
}

absl::Status SanityPlugin::Start(const std::string& socket_path) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(static_cast<csi::v1::Controller::Service*>(impl_.get()));
  builder.RegisterService(static_cast<csi::v1::Node::Service*>(impl_.get()));
  builder.RegisterService(static_cast<csi::v1::Identity::Service*>(impl_.get()));
  server_ = builder.BuildAndStart();
  if (!server_) {
    return absl::UnavailableError(absl::StrCat("cannot serve on '", socket_path, "'"));
  }
  return absl::OkStatus();
}

int SanityPlugin::LiveVolumes() const {
  return impl_->LiveVolumes();
}

int SanityPlugin::SucceededNodeCalls(const std::string& method) const {
  return impl_->SucceededNodeCalls(method);
}

}  // namespace stagehand::testing

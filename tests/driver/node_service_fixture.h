#pragma once

// The NodeService test fixture: the service over an in-process gRPC channel with fake transport,
// mounter and probe.

#include <stdlib.h>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/subprocess.h"
#include "driver/node_service.h"
#include "driver/volume_store.h"
#include "tests/fakes/fake_block_probe.h"
#include "tests/fakes/fake_mounter.h"
#include "tests/fakes/fake_transport.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::driver {

class NodeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    NodeServiceOptions options = PlainOptions();
    options.max_volumes_per_node = 2;
    options.initiator_name = "iqn.2026-11.dev.stagehand:test";
    NodeServiceDeps deps{transport_.AsRegistry(),
                         mounter_,
                         probe_,
                         [this](const std::string& d, std::string_view fs) {
                           formatted_.push_back(d + ":" + std::string(fs));
                           return absl::OkStatus();
                         },
                         [this](const std::string& d, std::string_view) {
                           checked_.push_back(d);
                           return absl::OkStatus();
                         },
                         [this](const std::string& d, const std::string& m, std::string_view) {
                           grown_.push_back(d + " " + m);
                           return absl::OkStatus();
                         }};
    service_ = std::make_unique<NodeService>(deps, options);
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    stub_ = csi::v1::Node::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }

  void TearDown() override { server_->Shutdown(); }

  // What a second service over the same fakes needs: this node, the fixture's directories.
  NodeServiceOptions PlainOptions() const {
    NodeServiceOptions options;
    options.node_id = "node-1";
    options.state_dir = root_ + "/state";
    options.runtime_dir = root_ + "/run";
    return options;
  }

  csi::v1::NodeStageVolumeRequest StageReq(const std::string& id, const std::string& fs = "ext4",
                                           const std::string& lun = "1") {
    csi::v1::NodeStageVolumeRequest r;
    r.set_volume_id(id);
    r.set_staging_target_path(root_ + "/stage-" + id);
    r.mutable_volume_capability()->mutable_mount()->set_fs_type(fs);
    r.mutable_volume_capability()->mutable_access_mode()->set_mode(
        csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    (*r.mutable_volume_context())["targetPortal"] = "127.0.0.1:3260";
    (*r.mutable_volume_context())["iqn"] = "iqn.2026-11.dev.stagehand:t1";
    (*r.mutable_volume_context())["lun"] = lun;
    return r;
  }

  // The same request with its portal named another way (the same target and LUN).
  static csi::v1::NodeStageVolumeRequest OtherPortalName(csi::v1::NodeStageVolumeRequest r) {
    (*r.mutable_volume_context())["targetPortal"] = "localhost:3260";
    return r;
  }

  bool HasRecord(const std::string& id) const {
    auto record = VolumeStore(root_ + "/state/volumes").Load(id);
    return !record.ok() || record->has_value();
  }

  csi::v1::NodePublishVolumeRequest PublishReq(const std::string& id) {
    csi::v1::NodePublishVolumeRequest r;
    r.set_volume_id(id);
    r.set_staging_target_path(root_ + "/stage-" + id);
    r.set_target_path(root_ + "/pod-" + id);
    r.mutable_volume_capability()->mutable_mount()->set_fs_type("ext4");
    r.mutable_volume_capability()->mutable_access_mode()->set_mode(
        csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
    return r;
  }

  grpc::Status Stage(const csi::v1::NodeStageVolumeRequest& r) {
    grpc::ClientContext ctx;
    csi::v1::NodeStageVolumeResponse resp;
    return stub_->NodeStageVolume(&ctx, r, &resp);
  }

  grpc::Status Unstage(const std::string& id) {
    grpc::ClientContext ctx;
    csi::v1::NodeUnstageVolumeRequest r;
    r.set_volume_id(id);
    r.set_staging_target_path(root_ + "/stage-" + id);
    csi::v1::NodeUnstageVolumeResponse resp;
    return stub_->NodeUnstageVolume(&ctx, r, &resp);
  }

  grpc::Status Publish(const csi::v1::NodePublishVolumeRequest& r) {
    grpc::ClientContext ctx;
    csi::v1::NodePublishVolumeResponse resp;
    return stub_->NodePublishVolume(&ctx, r, &resp);
  }

  grpc::Status Unpublish(const std::string& id) {
    grpc::ClientContext ctx;
    csi::v1::NodeUnpublishVolumeRequest r;
    r.set_volume_id(id);
    r.set_target_path(root_ + "/pod-" + id);
    csi::v1::NodeUnpublishVolumeResponse resp;
    return stub_->NodeUnpublishVolume(&ctx, r, &resp);
  }

  stagehand::testing::TempDir temp_;
  const std::string root_ = temp_.path();
  stagehand::testing::FakeTransport transport_;
  stagehand::testing::FakeMounter mounter_;
  stagehand::testing::FakeBlockProbe probe_;
  std::vector<std::string> formatted_;
  std::vector<std::string> checked_;
  std::vector<std::string> grown_;
  std::unique_ptr<NodeService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<csi::v1::Node::Stub> stub_;
};

}  // namespace stagehand::driver

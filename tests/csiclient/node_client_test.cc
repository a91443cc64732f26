#include "csiclient/node_client.h"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "base/subprocess.h"
#include "csiclient/reconciler_client.h"
#include "proto/csi.grpc.pb.h"
#include "tests/testing/slow_server.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::csiclient {
namespace {

// A driver whose NodeStageVolume only returns once its caller gives up.
class StuckNode final : public csi::v1::Node::Service {
 public:
  grpc::Status NodeStageVolume(grpc::ServerContext* context, const csi::v1::NodeStageVolumeRequest*,
                               csi::v1::NodeStageVolumeResponse*) override {
    entered_.set_value();
    while (!context->IsCancelled()) {
      std::this_thread::yield();
    }
    saw_cancel_ = true;
    return grpc::Status(grpc::StatusCode::CANCELLED, "caller went away");
  }

  std::promise<void> entered_;
  std::atomic<bool> saw_cancel_{false};
};

class CsiNodeClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(&node_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }

  void TearDown() override { server_->Shutdown(std::chrono::system_clock::now()); }

  reconciler::StageCall Call() const {
    reconciler::StageCall call;
    call.volume_handle = "v1";
    call.staging_path = root_ + "/staging";
    call.capability.fs_type = "ext4";
    return call;
  }

  stagehand::testing::TempDir temp_;
  const std::string root_ = temp_.path();
  const std::string socket_ = root_ + "/csi.sock";
  StuckNode node_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(CsiNodeClientTest, CancelAllEndsACallInFlightAndRefusesNewOnes) {
  auto canceller = std::make_shared<CallCanceller>();
  ReconcilerClient client(
      std::make_shared<NodeClient>("d.dev", socket_, NodeClient::Options{.canceller = canceller}),
      nullptr);
  auto entered = node_.entered_.get_future();
  auto stage = std::async(std::launch::async,
                          [&] { return client.Stage(Call(), std::chrono::minutes(10)); });
  entered.wait();  // The driver is working on it.

  canceller->CancelAll();
  const absl::Status status = stage.get();

  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_EQ(client.Stage(Call(), std::chrono::minutes(10)).code(), absl::StatusCode::kCancelled)
      << "no new call after CancelAll";
}

class AnsweringNode final : public csi::v1::Node::Service {
 public:
  grpc::Status NodeGetInfo(grpc::ServerContext*, const csi::v1::NodeGetInfoRequest*,
                           csi::v1::NodeGetInfoResponse* response) override {
    response->set_node_id("n1");
    return grpc::Status::OK;
  }
};

// A driver on a loaded node (or in a slow VM) takes a while to accept a connection and send its
// first HTTP/2 frame: the connection attempt waits for it, and a call that does not wait for a
// driver that is not there (stagehandctl's) still reaches this one. gRPC reads its "minimum
// reconnect backoff" as the shortest time a connection attempt is given; set to 100 ms, every
// connection slower than that failed with "timed out before receiving SETTINGS frame".
TEST(NodeClientConnectTest, ADriverSlowToAnswerANewConnectionIsWaitedFor) {
  stagehand::testing::TempDir temp;
  const std::string socket = temp.path() + "/slow.sock";
  AnsweringNode node;
  stagehand::testing::SlowServer server(socket, &node, std::chrono::milliseconds(600));

  NodeClient::Options options;
  options.wait_for_ready = false;  // As stagehandctl's calls: a driver not there fails at once.
  NodeClient client("", socket, options);
  auto info = client.GetInfo(std::chrono::seconds(30));

  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->node_id(), "n1");
}

}  // namespace
}  // namespace stagehand::csiclient

#include "registration/plugin_client.h"

#include <chrono>
#include <stop_token>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "proto/pluginregistration.grpc.pb.h"
#include "tests/testing/slow_server.h"
#include "tests/testing/temp_dir.h"

namespace stagehand::registration {
namespace {

class Registration final : public pluginregistration::Registration::Service {
 public:
  grpc::Status GetInfo(grpc::ServerContext*, const pluginregistration::InfoRequest*,
                       pluginregistration::PluginInfo* info) override {
    info->set_type("CSIPlugin");
    info->set_name("slow.example.com");
    return grpc::Status::OK;
  }
};

// A plugin on a loaded node takes a while to send its first HTTP/2 frame on a new connection;
// the dial waits for it within its own timeout. (With gRPC's "minimum reconnect backoff" at
// 50 ms, every attempt slower than that was dropped and retried, so such a plugin was never
// registered.)
TEST(PluginClientTest, APluginSlowToAnswerANewConnectionIsRegistered) {
  stagehand::testing::TempDir temp;
  const std::string socket = temp.path() + "/slow-reg.sock";
  Registration registration;
  stagehand::testing::SlowServer server(socket, &registration, std::chrono::milliseconds(600));

  auto channel = DialUnix(socket, std::chrono::seconds(30));
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto info = GetInfo(*channel, std::chrono::seconds(30), std::stop_token());

  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name(), "slow.example.com");
}

}  // namespace
}  // namespace stagehand::registration

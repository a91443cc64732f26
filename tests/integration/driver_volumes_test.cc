// An agent without a reconciler (Kubernetes mode, where the kubelet is the reconciler, or one
// that only serves the driver) lists the built-in driver's own volumes in the agent API, with
// their targets and what is wrong with them.

#include <signal.h>

#include <chrono>
#include <string>
#include <thread>

#include <absl/strings/str_cat.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "base/process.h"
#include "proto/agent.grpc.pb.h"
#include "testbed/stagehand_daemon.h"
#include "tests/integration/node_test_base.h"

namespace stagehand::testing {
namespace {

namespace agentpb = ::stagehand::agent::v1;
using ::testing::Contains;
using ::testing::HasSubstr;

class DriverVolumesTest : public NodeIntegrationTest {
 protected:
  std::vector<std::string> DaemonFlags() const override { return {"--no-watch-plugins"}; }

  agentpb::ListVolumesResponse List() {
    auto agent = agentpb::Agent::NewStub(grpc::CreateChannel(
        "unix:" + daemon_->runtime_dir() + "/agent.sock", grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    agentpb::ListVolumesResponse response;
    const grpc::Status s = agent->ListVolumes(&context, agentpb::ListVolumesRequest(), &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }

  agentpb::AgentStatus Status() {
    auto agent = agentpb::Agent::NewStub(grpc::CreateChannel(
        "unix:" + daemon_->runtime_dir() + "/agent.sock", grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    agentpb::AgentStatus status;
    EXPECT_TRUE(agent->GetStatus(&context, agentpb::GetStatusRequest(), &status).ok());
    return status;
  }
};

TEST_F(DriverVolumesTest, TheDriversVolumesAreListedWithTheirTargetsAndProblems) {
  EXPECT_EQ(List().volumes_size(), 0);
  AddLun();
  const std::string target = root_ + "/pod1";
  ASSERT_TRUE(Stage(StageRequest("vol-k8s")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-k8s", target)).ok());

  auto listed = List();
  ASSERT_EQ(listed.volumes_size(), 1);
  const auto& v = listed.volumes(0);
  EXPECT_EQ(v.name(), "vol-k8s");
  EXPECT_EQ(v.driver(), "iscsi.stagehand.dev");
  EXPECT_EQ(v.staging_path(), Staging("vol-k8s"));
  EXPECT_EQ(v.phase(), "published");
  ASSERT_EQ(v.targets_size(), 1);
  EXPECT_EQ(v.targets(0).target_path(), target);
  EXPECT_EQ(v.condition(), "");
  EXPECT_EQ(Status().volumes_published(), 1);

  // Its session process dies once (its keeper starts a successor), then for good (its keeper
  // first): the listing and the status say so, naming the process that died last.
  ASSERT_EQ(testbed::SessionPidsUnder(root_).size(), 1u);
  const auto first = SessionNow();
  ASSERT_TRUE(first.has_value());
  kill(first->pid(), SIGKILL);
  ASSERT_TRUE(WaitForStatus([&](const state::v1::SessionStatus& s) {
    return s.pid() != first->pid() && s.state() == state::v1::SessionStatus::UP;
  }));
  const int successor = SessionNow()->pid();
  testbed::KillSessionsForGood();
  EXPECT_THAT(List().volumes(0).condition(),
              HasSubstr(absl::StrCat("SessionGone: iSCSI session process ", successor, " ")));
  const auto status = Status();
  EXPECT_EQ(status.volumes_failing(), 1);
  EXPECT_THAT(status.problems(), Contains(HasSubstr("volume 'vol-k8s' is abnormal")));

  EXPECT_TRUE(Unpublish("vol-k8s", target).ok());
  EXPECT_TRUE(Unstage("vol-k8s", Staging("vol-k8s")).ok());
  EXPECT_EQ(List().volumes_size(), 0);
}

}  // namespace
}  // namespace stagehand::testing

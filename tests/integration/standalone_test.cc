// The standalone agent end to end: manifests in a directory, the reconciler, the built-in iSCSI
// driver registered through its own registration socket, a real tgtd, real mounts.

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "proto/agent.grpc.pb.h"
#include "tests/integration/node_test_base.h"

namespace stagehand::testing {
namespace {

using ::testing::HasSubstr;

namespace agentpb = ::stagehand::agent::v1;

int MountCount(const std::string& target) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, devno, root, mount_point;
    fields >> id >> parent >> devno >> root >> mount_point;
    n += mount_point == target ? 1 : 0;
  }
  return n;
}

const agentpb::Volume* FindVolume(const agentpb::ListVolumesResponse& r, const std::string& name) {
  for (const auto& v : r.volumes()) {
    if (v.name() == name) {
      return &v;
    }
  }
  return nullptr;
}

class StandaloneTest : public NodeIntegrationTest {
 protected:
  void SetUp() override {
    NodeIntegrationTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    manifests_ = root_ + "/manifests";
    ASSERT_TRUE(MakeDirs(manifests_, 0755).ok());
    ConnectAgent();
  }

  void ConnectAgent() {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    agent_ = agentpb::Agent::NewStub(
        grpc::CreateCustomChannel("unix:" + daemon_->runtime_dir() + "/agent.sock",
                                  grpc::InsecureChannelCredentials(), args));
  }

  void RestartDaemon() {
    daemon_->Kill();
    daemon_ = std::make_unique<StagehandDaemon>(root_);
    ASSERT_TRUE(daemon_->Start().ok());
    ConnectAgent();
  }

  std::string Manifest(const std::string& name, const std::vector<std::string>& targets,
                       const std::string& driver = "iscsi.stagehand.dev") const {
    std::string yaml = "name: " + name + "\ndriver: " + driver + "\nvolumeHandle: " + name +
                       "\ncapability:\n  mount:\n    fsType: ext4\nvolumeContext:\n";
    for (const auto& [k, v] : Context()) {
      yaml += "  " + k + ": \"" + v + "\"\n";
    }
    yaml += "publish:\n";
    for (const auto& t : targets) {
      const bool ro = t.ends_with(":ro");
      yaml += "  - targetPath: " + root_ + "/" + t.substr(0, t.find(':')) +
              (ro ? "\n    readOnly: true\n" : "\n");
    }
    return yaml;
  }

  // Atomic replace, as the README recommends.
  void Declare(const std::string& file, const std::string& yaml) {
    ASSERT_TRUE(WriteFileAtomically(manifests_ + "/" + file, yaml, 0644).ok());
  }

  // Long-polls the agent API until `predicate` holds (60 s at most).
  agentpb::ListVolumesResponse WaitVolumes(
      const std::function<bool(const agentpb::ListVolumesResponse&)>& predicate) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    agentpb::ListVolumesResponse response;
    uint64_t generation = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      context.set_wait_for_ready(true);
      agentpb::ListVolumesRequest request;
      request.set_after_generation(generation);
      request.set_wait_ms(generation == 0 ? 0 : 5000);
      response.Clear();
      if (auto s = agent_->ListVolumes(&context, request, &response); !s.ok()) {
        ADD_FAILURE() << "ListVolumes: " << s.error_message();
        return response;
      }
      if (response.ready() && predicate(response)) {
        return response;
      }
      generation = response.generation();
    }
    ADD_FAILURE() << "condition not reached; last: " << response.DebugString();
    return response;
  }

  static std::function<bool(const agentpb::ListVolumesResponse&)> PhaseIs(
      const std::string& name, const std::string& phase) {
    return [name, phase](const agentpb::ListVolumesResponse& r) {
      const auto* v = FindVolume(r, name);
      return v != nullptr && v->phase() == phase;
    };
  }

  static std::function<bool(const agentpb::ListVolumesResponse&)> Gone(const std::string& name) {
    return [name](const agentpb::ListVolumesResponse& r) { return FindVolume(r, name) == nullptr; };
  }

  std::string manifests_;
  std::unique_ptr<agentpb::Agent::Stub> agent_;
};

TEST_F(StandaloneTest, DeclaredVolumeAppearsFollowsItsTargetsAndGoesWithItsManifest) {
  AddLun();

  Declare("data.yaml", Manifest("data", {"app1", "app2:ro"}));
  auto published = WaitVolumes(PhaseIs("data", "published"));
  ASSERT_TRUE(WriteFileAtomically(root_ + "/app1/hello.txt", "hello", 0644).ok());
  auto read_back = ReadFileToString(root_ + "/app2/hello.txt");
  const int ro_fd = open((root_ + "/app2/nope").c_str(), O_CREAT | O_WRONLY, 0644);
  const int ro_errno = errno;

  EXPECT_EQ(FindVolume(published, "data")->targets_size(), 2);
  ASSERT_TRUE(read_back.ok());
  EXPECT_EQ(*read_back, "hello");
  EXPECT_EQ(ro_fd, -1);
  EXPECT_EQ(ro_errno, EROFS);
  EXPECT_EQ(MountCount(root_ + "/app1"), 1);

  // Add one target, drop another: only those two change.
  Declare("data.yaml", Manifest("data", {"app1", "app3"}));
  WaitVolumes([this](const auto& r) {
    const auto* v = FindVolume(r, "data");
    return v != nullptr && v->phase() == "published" && v->targets_size() == 2 &&
           MountCount(root_ + "/app2") == 0;
  });
  EXPECT_EQ(MountCount(root_ + "/app3"), 1);
  EXPECT_EQ(MountCount(root_ + "/app1"), 1);
  auto again = ReadFileToString(root_ + "/app3/hello.txt");
  EXPECT_EQ(again.value_or(""), "hello");

  ASSERT_EQ(unlink((manifests_ + "/data.yaml").c_str()), 0);
  WaitVolumes(Gone("data"));

  EXPECT_THAT(Leftovers(root_), ::testing::IsEmpty());
  EXPECT_TRUE(RunningSessionProcesses().empty());
}

TEST_F(StandaloneTest, ABrokenManifestDoesNotUnmountAWorkingVolumeEvenAcrossARestart) {
  AddLun();
  Declare("data.yaml", Manifest("data", {"app"}));
  WaitVolumes(PhaseIs("data", "published"));
  ASSERT_TRUE(WriteFileAtomically(root_ + "/app/keep.txt", "kept", 0644).ok());

  Declare("data.yaml", "name: data\ndrivr: typo\n");
  auto broken = WaitVolumes([](const auto& r) {
    const auto* v = FindVolume(r, "data");
    return v != nullptr && !v->manifest_error().empty();
  });
  EXPECT_THAT(FindVolume(broken, "data")->manifest_error(), HasSubstr("drivr"));
  EXPECT_EQ(FindVolume(broken, "data")->phase(), "published");
  RestartDaemon();
  auto after = WaitVolumes([](const auto& r) { return FindVolume(r, "data") != nullptr; });

  EXPECT_EQ(MountCount(root_ + "/app"), 1);
  EXPECT_EQ(ReadFileToString(root_ + "/app/keep.txt").value_or(""), "kept");
  EXPECT_FALSE(FindVolume(after, "data")->blocked().empty());

  // Fixed, then removed: it is torn down only now.
  Declare("data.yaml", Manifest("data", {"app"}));
  WaitVolumes([](const auto& r) {
    const auto* v = FindVolume(r, "data");
    return v != nullptr && v->phase() == "published" && v->manifest_error().empty();
  });
  ASSERT_EQ(unlink((manifests_ + "/data.yaml").c_str()), 0);
  WaitVolumes(Gone("data"));
  EXPECT_THAT(Leftovers(root_), ::testing::IsEmpty());
}

TEST_F(StandaloneTest, SigkillWhileStagingThenRestartConvergesWithNothingMountedTwice) {
  AddLun();
  Declare("data.yaml", Manifest("data", {"app"}));
  // Kill the agent in the middle: as soon as the stage is under way.
  WaitVolumes([](const auto& r) {
    const auto* v = FindVolume(r, "data");
    return v != nullptr && (v->in_flight() == "stage" || v->phase() == "published");
  });

  RestartDaemon();
  WaitVolumes(PhaseIs("data", "published"));
  RestartDaemon();  // An intact volume is adopted as it is.
  auto adopted = WaitVolumes(PhaseIs("data", "published"));

  EXPECT_EQ(MountCount(root_ + "/app"), 1);
  EXPECT_EQ(MountCount(FindVolume(adopted, "data")->staging_path()), 1);
  ASSERT_EQ(unlink((manifests_ + "/data.yaml").c_str()), 0);
  WaitVolumes(Gone("data"));
  EXPECT_THAT(Leftovers(root_), ::testing::IsEmpty());
  EXPECT_TRUE(RunningSessionProcesses().empty());
}

TEST_F(StandaloneTest, RestartBetweenUnpublishAndUnstageStillUnstages) {
  AddLun();
  Declare("data.yaml", Manifest("data", {"app"}));
  WaitVolumes(PhaseIs("data", "published"));
  Declare("data.yaml", Manifest("data", {}));
  WaitVolumes([](const auto& r) {
    const auto* v = FindVolume(r, "data");
    return v != nullptr && v->targets_size() == 0 && v->in_flight().empty();
  });

  // Down between the two steps; the manifest goes while nobody watches.
  daemon_->Kill();
  ASSERT_EQ(unlink((manifests_ + "/data.yaml").c_str()), 0);
  RestartDaemon();
  WaitVolumes(Gone("data"));

  EXPECT_THAT(Leftovers(root_), ::testing::IsEmpty());
  EXPECT_TRUE(RunningSessionProcesses().empty());
}

TEST_F(StandaloneTest, ASecondDriverServesAVolumeFromTheSameAgent) {
  AddLun();
  const std::string second_root = MakeTempRoot();
  auto second = std::make_unique<StagehandDaemon>(
      second_root,
      std::vector<std::string>{"--driver-name=other.stagehand.dev",
                               "--registration-dir=" + daemon_->state_dir() + "/plugins_registry",
                               "--no-watch-plugins"});
  ASSERT_TRUE(second->Start().ok());

  Declare("data.yaml", Manifest("data", {"app"}, "other.stagehand.dev"));
  auto published = WaitVolumes(PhaseIs("data", "published"));
  EXPECT_EQ(FindVolume(published, "data")->driver(), "other.stagehand.dev");
  EXPECT_EQ(MountCount(root_ + "/app"), 1);
  ASSERT_EQ(unlink((manifests_ + "/data.yaml").c_str()), 0);
  WaitVolumes(Gone("data"));

  EXPECT_THAT(Leftovers(root_), ::testing::IsEmpty());
  EXPECT_THAT(Leftovers(second_root), ::testing::IsEmpty());
  second->Kill();
  ForceCleanup(second_root);
}

}  // namespace
}  // namespace stagehand::testing

// What breaks under a staged volume behind stagehand's back (its mounts, its loop device, its
// FUSE connection) shows everywhere the agent reports health: NodeGetVolumeHealth, the
// NodeGetVolumeStats condition, the agent API and `stagehandctl agent volumes`, and /metrics;
// and it clears once the volume is staged or published again.

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/process.h"
#include "base/subprocess.h"
#include "base/unique_fd.h"
#include "health/reason.h"
#include "proto/agent.grpc.pb.h"
#include "testbed/stagehand_daemon.h"
#include "tests/integration/node_test_base.h"
#include "tests/testing/http_get.h"

#ifndef STAGEHANDCTL_BINARY
#error "STAGEHANDCTL_BINARY must be defined (the stagehandctl binary under test)"
#endif

namespace stagehand::testing {
namespace {

namespace agentpb = ::stagehand::agent::v1;
using ::testing::HasSubstr;
using ::testing::Not;

// The agent as the kubelet drives it: no reconciler, so nothing repairs what the test breaks
// and what the agent reports comes from the built-in driver's own health checks.
class HealthTest : public NodeIntegrationTest {
 protected:
  std::vector<std::string> DaemonFlags() const override { return {"--no-watch-plugins"}; }

  std::string AgentSocket() const { return daemon_->runtime_dir() + "/agent.sock"; }

  std::unique_ptr<agentpb::Agent::Stub> Agent() const {
    return agentpb::Agent::NewStub(
        grpc::CreateChannel("unix:" + AgentSocket(), grpc::InsecureChannelCredentials()));
  }

  // The volume's condition in the agent API ("" when it is healthy or not listed).
  std::string AgentCondition(const std::string& volume_id) const {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    agentpb::ListVolumesResponse response;
    const grpc::Status s = Agent()->ListVolumes(&context, {}, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    for (const auto& v : response.volumes()) {
      if (v.name() == volume_id) {
        return v.condition();
      }
    }
    ADD_FAILURE() << volume_id << " is not listed: " << response.DebugString();
    return "";
  }

  std::string CliVolumes() const {
    auto r = RunProcess({STAGEHANDCTL_BINARY, "--agent-socket", AgentSocket(), "agent", "volumes"});
    EXPECT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->output : r.status().ToString());
    return r.ok() ? r->output : "";
  }

  int MetricsPort() const {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    agentpb::AgentStatus status;
    EXPECT_TRUE(Agent()->GetStatus(&context, {}, &status).ok());
    return status.metrics_port();
  }

  // What /readyz answers (503 here: no kubelet registers the driver), whatever its code.
  std::string Readyz() const {
    const auto readyz = HttpGet(MetricsPort(), "/readyz");
    EXPECT_TRUE(readyz.has_value());
    return readyz ? readyz->body : "";
  }

  // The stagehand_volume_health_problem lines of /metrics for `volume_id`.
  std::string ProblemMetrics(const std::string& volume_id) const {
    const auto metrics = HttpGet(MetricsPort(), "/metrics");
    EXPECT_TRUE(metrics && metrics->code == 200);
    std::string lines;
    for (const auto line : absl::StrSplit(metrics ? metrics->body : "", '\n')) {
      if (absl::StartsWith(line, "stagehand_volume_health_problem{") &&
          absl::StrContains(line, absl::StrCat("volume=\"", volume_id, "\""))) {
        absl::StrAppend(&lines, line, "\n");
      }
    }
    return lines;
  }

  // `reason` with `status` wherever the agent reports health; the stats condition of
  // `broken_path` abnormal unless the volume is only degraded.
  void ExpectShown(const std::string& volume_id, const std::string& reason,
                   csi::v1::VolumeHealthErrorType status, const std::string& broken_path) {
    SCOPED_TRACE(reason);
    csi::v1::NodeGetVolumeHealthResponse health;
    ASSERT_TRUE(Health(volume_id, &health).ok());
    bool found = false;
    for (const auto& e : health.volume_health().health_statuses()) {
      if (e.reason() == reason) {
        found = true;
        EXPECT_EQ(e.status(), status) << e.DebugString();
        EXPECT_FALSE(e.message().empty());
      }
    }
    EXPECT_TRUE(found) << health.DebugString();

    csi::v1::NodeGetVolumeStatsResponse stats;
    const grpc::Status s = Stats(volume_id, broken_path, &stats);
    if (s.ok()) {
      // The condition says whether this path works: a degraded volume still does.
      EXPECT_EQ(stats.volume_condition().abnormal(), status != csi::v1::DEGRADED)
          << stats.DebugString();
    } else {
      // A path with nothing mounted has no stats to give; the spec's code for it.
      EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    }
    EXPECT_THAT(AgentCondition(volume_id), HasSubstr(reason + ": "));
    EXPECT_THAT(CliVolumes(), HasSubstr(reason));
    const auto known = health::ReasonNamed(reason);
    ASSERT_TRUE(known.has_value()) << reason << " is not in health/reason.h";
    EXPECT_THAT(ProblemMetrics(volume_id),
                HasSubstr(absl::StrCat("status=\"", csi::v1::VolumeHealthErrorType_Name(status),
                                       "\",reason=\"", reason, "\",heals=\"",
                                       health::Info(*known).heals ? "yes" : "no", "\"} 1")));
    EXPECT_THAT(Readyz(), HasSubstr(absl::StrCat("volume '", volume_id, "' is abnormal: ")));
    EXPECT_THAT(Readyz(), HasSubstr(reason + ": "));
  }

  void ExpectHealthy(const std::string& volume_id, const std::string& stats_path) {
    csi::v1::NodeGetVolumeHealthResponse health;
    ASSERT_TRUE(Health(volume_id, &health).ok());
    EXPECT_EQ(health.volume_health().health_statuses_size(), 0) << health.DebugString();
    csi::v1::NodeGetVolumeStatsResponse stats;
    ASSERT_TRUE(Stats(volume_id, stats_path, &stats).ok());
    EXPECT_FALSE(stats.volume_condition().abnormal()) << stats.DebugString();
    EXPECT_EQ(AgentCondition(volume_id), "");
    EXPECT_THAT(CliVolumes(), Not(HasSubstr("abnormal")));
    EXPECT_EQ(ProblemMetrics(volume_id), "");
    EXPECT_THAT(Readyz(), Not(HasSubstr(absl::StrCat("'", volume_id, "'"))));
  }

  // The loop device whose backing file lies under the test's root ("" if none).
  std::string OurLoopDevice() const {
    std::string found;
    DIR* d = opendir("/sys/block");
    while (const dirent* e = d == nullptr ? nullptr : readdir(d)) {
      const std::string name = e->d_name;
      if (!name.starts_with("loop")) {
        continue;
      }
      auto backing = ReadFileToString("/sys/block/" + name + "/loop/backing_file");
      if (backing.ok() && backing->starts_with(root_ + "/")) {
        found = "/dev/" + name;
      }
    }
    if (d != nullptr) {
      closedir(d);
    }
    return found;
  }

  // The (only) session's FUSE mount point.
  std::string FuseMount() const {
    const auto pids = testbed::SessionPidsUnder(root_);
    EXPECT_EQ(pids.size(), 1u);
    auto out = RunProcess({"ls", daemon_->runtime_dir() + "/sessions"});
    if (!out.ok() || out->output.empty()) {
      return "";
    }
    return daemon_->runtime_dir() + "/sessions/" + out->output.substr(0, out->output.find('\n')) +
           "/mnt";
  }
};

TEST_F(HealthTest, AStagingMountRemovedBehindOurBackIsShownUntilStagedAgain) {
  AddLun();
  const std::string target = root_ + "/pod1";
  ASSERT_TRUE(Stage(StageRequest("vol-sm")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-sm", target)).ok());
  ExpectHealthy("vol-sm", target);

  ASSERT_EQ(umount2(Staging("vol-sm").c_str(), 0), 0) << strerror(errno);
  ExpectShown("vol-sm", "StagingMountMissing", csi::v1::INACCESSIBLE, Staging("vol-sm"));

  ASSERT_TRUE(Unpublish("vol-sm", target).ok());
  ASSERT_TRUE(Unstage("vol-sm", Staging("vol-sm")).ok());
  ASSERT_TRUE(Stage(StageRequest("vol-sm")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-sm", target)).ok());
  ExpectHealthy("vol-sm", target);
  EXPECT_TRUE(Unpublish("vol-sm", target).ok());
  EXPECT_TRUE(Unstage("vol-sm", Staging("vol-sm")).ok());
}

TEST_F(HealthTest, APublishMountRemovedBehindOurBackIsShownUntilPublishedAgain) {
  AddLun();
  const std::string target = root_ + "/pod1";
  ASSERT_TRUE(Stage(StageRequest("vol-pm")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-pm", target)).ok());

  ASSERT_EQ(umount2(target.c_str(), 0), 0) << strerror(errno);
  ExpectShown("vol-pm", "PublishMountMissing", csi::v1::INACCESSIBLE, target);

  ASSERT_TRUE(Unpublish("vol-pm", target).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-pm", target)).ok());
  ExpectHealthy("vol-pm", target);
  EXPECT_TRUE(Unpublish("vol-pm", target).ok());
  EXPECT_TRUE(Unstage("vol-pm", Staging("vol-pm")).ok());
}

// `losetup -d` of a block volume's loop device: nothing holds it open, so it goes at once and
// the published device node leads nowhere.
TEST_F(HealthTest, ADetachedLoopDeviceIsShownAndTheVolumeStillUnstages) {
  AddLun();
  const std::string target = root_ + "/pod1";
  ASSERT_TRUE(Stage(StageRequest("vol-ld", /*block=*/true)).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-ld", target, /*block=*/true)).ok());
  const std::string loop = OurLoopDevice();
  ASSERT_FALSE(loop.empty());

  auto detached = RunProcess({"losetup", "-d", loop});
  ASSERT_TRUE(detached.ok() && detached->exit_code == 0);
  ASSERT_TRUE(OurLoopDevice().empty());
  ExpectShown("vol-ld", "LoopDeviceGone", csi::v1::INACCESSIBLE, target);

  EXPECT_TRUE(Unpublish("vol-ld", target).ok());
  EXPECT_TRUE(Unstage("vol-ld", Staging("vol-ld")).ok());
}

// `losetup -d` under a mounted filesystem only marks the device to go with its last user: the
// volume works on, degraded, and a restage gives it a device of its own again.
TEST_F(HealthTest, ALoopDeviceDetachedUnderAMountIsShownDegradedUntilStagedAgain) {
  AddLun();
  const std::string target = root_ + "/pod1";
  ASSERT_TRUE(Stage(StageRequest("vol-lm")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-lm", target)).ok());
  const std::string loop = OurLoopDevice();
  ASSERT_FALSE(loop.empty());

  auto detached = RunProcess({"losetup", "-d", loop});
  ASSERT_TRUE(detached.ok() && detached->exit_code == 0);
  ExpectShown("vol-lm", "LoopDeviceDetaching", csi::v1::DEGRADED, target);
  EXPECT_TRUE(testbed::WriteDurably(target + "/still-works", "yes"))
      << "a degraded volume still works";

  ASSERT_TRUE(Unpublish("vol-lm", target).ok());
  ASSERT_TRUE(Unstage("vol-lm", Staging("vol-lm")).ok());
  ASSERT_TRUE(Stage(StageRequest("vol-lm")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-lm", target)).ok());
  ExpectHealthy("vol-lm", target);
  EXPECT_EQ(ReadFileToString(target + "/still-works").value_or(""), "yes");
  EXPECT_TRUE(Unpublish("vol-lm", target).ok());
  EXPECT_TRUE(Unstage("vol-lm", Staging("vol-lm")).ok());
}

// Aborting the FUSE connection (what `echo 1 > .../abort` does to a hung FUSE server) kills
// the volume's data path for good: the session says why before it exits.
TEST_F(HealthTest, AnAbortedFuseConnectionIsShownAndTheVolumeStillUnstages) {
  AddLun();
  const std::string target = root_ + "/pod1";
  ASSERT_TRUE(Stage(StageRequest("vol-fa", /*block=*/true)).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-fa", target, /*block=*/true)).ok());
  const std::vector<int> pids = testbed::SessionPidsUnder(root_);
  ASSERT_EQ(pids.size(), 1u);

  const absl::Status aborted = testbed::AbortFuseConnection(FuseMount());
  ASSERT_TRUE(aborted.ok()) << aborted;
  while (ProcessStartTime(pids[0]) != 0) {
    std::this_thread::yield();
  }
  ExpectShown("vol-fa", "FuseConnectionAborted", csi::v1::INACCESSIBLE, target);
  EXPECT_EQ(testbed::WriteBlockDirect(target, 0, 'x'), EIO) << "I/O after the abort fails";

  EXPECT_TRUE(Unpublish("vol-fa", target).ok());
  EXPECT_TRUE(Unstage("vol-fa", Staging("vol-fa")).ok());
}

}  // namespace
}  // namespace stagehand::testing

// The standalone agent end to end: manifests in a directory, the reconciler, the built-in iSCSI
// driver registered through its own registration socket, a real tgtd, real mounts.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/match.h>
#include <absl/strings/str_replace.h>
#include <gmock/gmock.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/subprocess.h"
#include "base/unique_fd.h"
#include "proto/agent.grpc.pb.h"
#include "tests/integration/node_test_base.h"
#include "tests/integration/prometheus_server.h"

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
    daemon_ = std::make_unique<testbed::StagehandDaemon>(root_);
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

  EXPECT_THAT(testbed::Leftovers(root_), ::testing::IsEmpty());
  EXPECT_TRUE(testbed::RunningSessionProcesses().empty());
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
  EXPECT_THAT(testbed::Leftovers(root_), ::testing::IsEmpty());
}

// A typo in --manifest-dir or a config volume not mounted yet: the agent starts with no
// manifest directory. That must not read as "nothing is declared" (it used to create the
// directory empty and unstage everything right after start).
TEST_F(StandaloneTest, AMissingManifestDirectoryAtStartKeepsEveryVolumeAsItIs) {
  AddLun();
  Declare("data.yaml", Manifest("data", {"app"}));
  WaitVolumes(PhaseIs("data", "published"));
  ASSERT_TRUE(WriteFileAtomically(root_ + "/app/keep.txt", "kept", 0644).ok());
  const std::vector<int> sessions = testbed::RunningSessionProcesses();
  ASSERT_EQ(sessions.size(), 1u);
  daemon_->Kill();
  ASSERT_EQ(rename(manifests_.c_str(), (manifests_ + ".off").c_str()), 0);

  RestartDaemon();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  context.set_wait_for_ready(true);
  agentpb::AgentStatus status;
  ASSERT_TRUE(agent_->GetStatus(&context, agentpb::GetStatusRequest(), &status).ok());

  EXPECT_FALSE(status.ready());
  EXPECT_THAT(status.problems(), ::testing::Contains(HasSubstr("does not exist")));

  struct stat st {};

  EXPECT_NE(stat(manifests_.c_str(), &st), 0) << "the missing directory is not created";
  // Once it is back, the volume is adopted as it was: same session, one mount, data intact.
  ASSERT_EQ(rename((manifests_ + ".off").c_str(), manifests_.c_str()), 0);
  WaitVolumes(PhaseIs("data", "published"));
  EXPECT_EQ(testbed::RunningSessionProcesses(), sessions) << "never unstaged";
  EXPECT_EQ(MountCount(root_ + "/app"), 1);
  EXPECT_EQ(ReadFileToString(root_ + "/app/keep.txt").value_or(""), "kept");

  ASSERT_EQ(unlink((manifests_ + "/data.yaml").c_str()), 0);
  WaitVolumes(Gone("data"));
  EXPECT_THAT(testbed::Leftovers(root_), ::testing::IsEmpty());
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
  EXPECT_THAT(testbed::Leftovers(root_), ::testing::IsEmpty());
  EXPECT_TRUE(testbed::RunningSessionProcesses().empty());
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

  EXPECT_THAT(testbed::Leftovers(root_), ::testing::IsEmpty());
  EXPECT_TRUE(testbed::RunningSessionProcesses().empty());
}

TEST_F(StandaloneTest, ASecondDriverServesAVolumeFromTheSameAgent) {
  AddLun();
  const std::string second_root = testbed::MakeTempRoot();
  auto second = std::make_unique<testbed::StagehandDaemon>(
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

  EXPECT_THAT(testbed::Leftovers(root_), ::testing::IsEmpty());
  EXPECT_THAT(testbed::Leftovers(second_root), ::testing::IsEmpty());
  second->Kill();
  testbed::ForceCleanup(second_root);
}

// Kills the volume's session process (its keeper first: no successor) and returns the volume
// once it shows a condition.
class DeadDataPathTest : public StandaloneTest {
 protected:
  void ExpectADeadDataPathShownAsAProblem(const std::string& reason) {
    AddLun();
    Declare("data.yaml", Manifest("data", {"app"}));
    WaitVolumes(PhaseIs("data", "published"));
    ASSERT_EQ(testbed::RunningSessionProcesses().size(), 1u);

    testbed::KillSessionsForGood();
    auto abnormal = WaitVolumes([](const auto& r) {
      const auto* v = FindVolume(r, "data");
      return v != nullptr && !v->condition().empty();
    });
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    agentpb::AgentStatus status;
    ASSERT_TRUE(agent_->GetStatus(&context, agentpb::GetStatusRequest(), &status).ok());

    EXPECT_THAT(FindVolume(abnormal, "data")->condition(), HasSubstr("not running"));
    EXPECT_THAT(FindVolume(abnormal, "data")->condition(), HasSubstr(reason));
    EXPECT_EQ(status.volumes_failing(), 1);
    EXPECT_THAT(status.problems(), ::testing::Contains(HasSubstr("volume 'data' is abnormal")));
    ASSERT_EQ(unlink((manifests_ + "/data.yaml").c_str()), 0);
    WaitVolumes(Gone("data"));
    EXPECT_THAT(testbed::Leftovers(root_), ::testing::IsEmpty());
  }
};

// Stats rounds only (as for a driver without NodeGetVolumeHealth).
class StatsConditionTest : public DeadDataPathTest {
 protected:
  std::vector<std::string> DaemonFlags() const override {
    return {"--stats-period=1", "--health-period=0"};
  }
};

// A dead data path (the session process killed) was reported published and "problems: none";
// only NodeGetVolumeStats knew. The stats rounds now tell the reconciler, and the agent says so.
TEST_F(StatsConditionTest, ADeadDataPathIsShownAsAProblem) {
  ExpectADeadDataPathShownAsAProblem("not running");
}

// Health rounds (NodeGetVolumeHealth every 5 s by default); no stats round after the first.
class HealthRoundTest : public DeadDataPathTest {
 protected:
  std::vector<std::string> DaemonFlags() const override { return {"--stats-period=3600"}; }
};

TEST_F(HealthRoundTest, ADeadDataPathIsShownWithItsReasonWithinAHealthRound) {
  grpc::ClientContext context;
  agentpb::AgentStatus status;
  ASSERT_TRUE(agent_->GetStatus(&context, agentpb::GetStatusRequest(), &status).ok());
  PrometheusServer prometheus(root_, status.metrics_port());

  ExpectADeadDataPathShownAsAProblem("SessionGone: ");

  // Scraped while the volume was abnormal (the volume is gone now: look back).
  EXPECT_THAT(
      prometheus.QueryUntilPresent("max_over_time(stagehand_volume_health_problem{volume=\"data\","
                                   "reason=\"SessionGone\",status=\"INACCESSIBLE\"}[10m]) == 1"),
      HasSubstr("=> 1"));
}

TEST_F(StandaloneTest, APrometheusServerScrapesTheStatsOfAPublishedVolume) {
  daemon_->Kill();
  daemon_ = std::make_unique<testbed::StagehandDaemon>(
      root_, std::vector<std::string>{"--stats-period=1"});
  ASSERT_TRUE(daemon_->Start().ok());
  ConnectAgent();
  AddLun();
  Declare("data.yaml", Manifest("data", {"app"}));
  WaitVolumes(PhaseIs("data", "published"));
  grpc::ClientContext context;
  agentpb::AgentStatus status;
  ASSERT_TRUE(agent_->GetStatus(&context, agentpb::GetStatusRequest(), &status).ok());
  ASSERT_GT(status.metrics_port(), 0);

  PrometheusServer prometheus(root_, status.metrics_port());
  const std::string up = prometheus.QueryUntilPresent("up{job=\"stagehand\"} == 1");
  const std::string capacity =
      prometheus.QueryUntilPresent("stagehand_volume_stats_capacity_bytes{volume=\"data\"}");
  const std::string published =
      prometheus.QueryUntilPresent("stagehand_volumes{phase=\"published\"} == 1");
  const std::string stage_calls = prometheus.QueryUntilPresent(
      "stagehand_csi_operations_seconds_count{method_name=\"NodeStageVolume\",grpc_status_code="
      "\"OK\"}");
  // 1 MiB written and synced through the volume shows in its session's data-path counters.
  {
    const std::string file = root_ + "/app/written";
    const int fd = open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    const std::string mib(1 << 20, 'w');
    EXPECT_EQ(write(fd, mib.data(), mib.size()), static_cast<ssize_t>(mib.size()));
    EXPECT_EQ(fsync(fd), 0);
    close(fd);
  }
  const std::string written =
      prometheus.QueryUntilPresent("stagehand_datapath_written_bytes_total >= 1048576");
  const std::string errors = prometheus.QueryUntilPresent("stagehand_datapath_io_errors_total");

  EXPECT_THAT(up, HasSubstr("=> 1")) << "the exposition must be valid for Prometheus";
  EXPECT_THAT(capacity, HasSubstr("target=\"" + root_ + "/app\""));
  EXPECT_THAT(capacity, HasSubstr("driver_name=\"iscsi.stagehand.dev\""));
  EXPECT_THAT(capacity, ::testing::Not(HasSubstr("=> 0 ")));
  EXPECT_THAT(published, HasSubstr("=> 1"));
  EXPECT_THAT(stage_calls, HasSubstr("=> 1"));
  EXPECT_THAT(written, HasSubstr("volume_id="));
  EXPECT_THAT(errors, HasSubstr("=> 0 ")) << "no I/O errors on a healthy session";

  ASSERT_EQ(unlink((manifests_ + "/data.yaml").c_str()), 0);
  WaitVolumes(Gone("data"));
  EXPECT_THAT(testbed::Leftovers(root_), ::testing::IsEmpty());
}

// The expressions of the shipped dashboard (every "expr" in its JSON).
std::vector<std::string> DashboardExpressions(const google::protobuf::Value& v) {
  std::vector<std::string> out;
  if (v.has_struct_value()) {
    for (const auto& [key, field] : v.struct_value().fields()) {
      if (key == "expr" && field.has_string_value()) {
        out.push_back(field.string_value());
      }
      for (std::string& e : DashboardExpressions(field)) {
        out.push_back(std::move(e));
      }
    }
  } else if (v.has_list_value()) {
    for (const auto& item : v.list_value().values()) {
      for (std::string& e : DashboardExpressions(item)) {
        out.push_back(std::move(e));
      }
    }
  }
  return out;
}

// Every stagehand_* name in `text`.
std::set<std::string> MetricNames(const std::string& text) {
  std::set<std::string> names;
  for (size_t at = text.find("stagehand_"); at != std::string::npos;
       at = text.find("stagehand_", at + 1)) {
    if (at > 0 &&
        (std::isalnum(static_cast<unsigned char>(text[at - 1])) != 0 || text[at - 1] == '_')) {
      continue;
    }
    size_t end = at;
    while (end < text.size() &&
           (std::islower(static_cast<unsigned char>(text[end])) != 0 || text[end] == '_')) {
      ++end;
    }
    names.insert(text.substr(at, end - at));
  }
  return names;
}

class MonitoringTest : public StandaloneTest {
 protected:
  std::vector<std::string> DaemonFlags() const override { return {"--stats-period=1"}; }
};

// The shipped Grafana dashboard and alert rules (deploy/monitoring) query what a real agent
// exports: with a published volume that was written to, a volume that fails to stage and a
// stopped session (a health problem), a real Prometheus scraping the agent has a series of
// every stagehand metric they name, and evaluates every dashboard query.
TEST_F(MonitoringTest, TheDashboardAndTheAlertsQuerySeriesTheAgentExports) {
  auto dashboard_json =
      ReadFileToString(std::string(SH_SOURCE_DIR) + "/deploy/monitoring/stagehand-dashboard.json");
  auto rules =
      ReadFileToString(std::string(SH_SOURCE_DIR) + "/deploy/monitoring/stagehand.rules.yaml");
  ASSERT_TRUE(dashboard_json.ok() && rules.ok());
  google::protobuf::Value dashboard;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*dashboard_json, &dashboard).ok());
  const std::vector<std::string> expressions = DashboardExpressions(dashboard);
  ASSERT_GE(expressions.size(), 20U);
  std::set<std::string> names = MetricNames(*rules);
  for (const std::string& e : expressions) {
    names.merge(MetricNames(e));
  }

  grpc::ClientContext context;
  agentpb::AgentStatus status;
  ASSERT_TRUE(agent_->GetStatus(&context, agentpb::GetStatusRequest(), &status).ok());
  PrometheusServer prometheus(root_, status.metrics_port());
  AddLun();
  Declare("data.yaml", Manifest("data", {"app"}));
  std::string broken = Manifest("broken", {"other"});
  broken.replace(broken.find("lun: \"1\""), 8, "lun: \"7\"");  // No such LUN: stage fails.
  Declare("broken.yaml", broken);
  WaitVolumes(PhaseIs("data", "published"));
  {
    UniqueFd fd(open((root_ + "/app/written").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd.Valid());
    const std::string mib(1 << 20, 'w');
    EXPECT_EQ(write(fd.Get(), mib.data(), mib.size()), static_cast<ssize_t>(mib.size()));
    EXPECT_EQ(fsync(fd.Get()), 0);
  }
  ASSERT_THAT(prometheus.QueryUntilPresent("stagehand_datapath_written_bytes_total >= 1048576"),
              HasSubstr("=>"));
  const std::vector<int> sessions = testbed::RunningSessionProcesses();
  ASSERT_EQ(sessions.size(), 1U);
  ASSERT_EQ(kill(sessions[0], SIGSTOP), 0);
  absl::Cleanup resume = [&] { kill(sessions[0], SIGCONT); };
  ASSERT_THAT(
      prometheus.QueryUntilPresent("stagehand_volume_health_problem{reason=\"SessionStopped\"}"),
      HasSubstr("=>"));

  for (const std::string& name : names) {
    EXPECT_THAT(prometheus.QueryUntilPresent("count(last_over_time(" + name + "[10m]))"),
                HasSubstr("=>"))
        << name << " is queried by deploy/monitoring but has no series";
  }
  for (std::string e : expressions) {
    e = absl::StrReplaceAll(e, {{"$instance", ".*"}, {"$__rate_interval", "1m"}});
    auto answer = prometheus.Query(e);
    EXPECT_TRUE(answer.ok()) << e << ": " << answer.status();
  }

  std::move(resume).Invoke();
  ASSERT_EQ(unlink((manifests_ + "/data.yaml").c_str()), 0);
  ASSERT_EQ(unlink((manifests_ + "/broken.yaml").c_str()), 0);
  WaitVolumes(Gone("data"));
  WaitVolumes(Gone("broken"));
  EXPECT_THAT(testbed::Leftovers(root_), ::testing::IsEmpty());
}

}  // namespace
}  // namespace stagehand::testing

// Session processes run as transient systemd units: each in its own cgroup, so stopping the
// agent's unit (which kills everything in the agent's cgroup) leaves the data path running. The
// manager is a real `systemd --user` on a private bus (see user_systemd.h), and the session runs
// from the relocatable bundle, as it does under the host's systemd in Kubernetes.

#include <fcntl.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "base/process.h"
#include "base/sha256.h"
#include "base/subprocess.h"
#include "proto/state.pb.h"
#include "tests/integration/fio.h"
#include "tests/integration/node_test_base.h"
#include "tests/integration/user_systemd.h"
#include "tests/testing/dir_watch.h"
#include "transport/userspace/session_launcher.h"

namespace stagehand::testing {
namespace {

// Runs before any test (and before any thread): the whole test process, its tgtd, stagehand and
// the manager's units share one private mount namespace.
class PrivateNamespaceEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!testbed::IntegrationEnabled()) {
      return;
    }
    auto s = EnterPrivateSystemdNamespace();
    ASSERT_TRUE(s.ok()) << s;
  }
};

const auto* const kNamespace = ::testing::AddGlobalTestEnvironment(new PrivateNamespaceEnvironment);

class SystemdSessionTest : public NodeIntegrationTest {
 protected:
  static void SetUpTestSuite() {
    NodeIntegrationTest::SetUpTestSuite();
    if (!testbed::IntegrationEnabled()) {
      return;
    }
    manager_root_ = testbed::MakeTempRoot();
    manager_ = new UserSystemd();
    auto s = manager_->Start(manager_root_ + "/xdg");
    ASSERT_TRUE(s.ok()) << s;
  }

  static void TearDownTestSuite() {
    delete manager_;
    manager_ = nullptr;
    if (!manager_root_.empty()) {
      testbed::ForceCleanup(manager_root_);
    }
    NodeIntegrationTest::TearDownTestSuite();
  }

  void TearDown() override {
    if (HasFailure() && manager_ != nullptr) {
      auto units = manager_->Systemctl({"list-units", "--all", "--plain", "--no-legend"});
      auto log = ReadFileToString(manager_root_ + "/xdg/systemd.log");
      std::cerr << "---- systemd units ----\n"
                << (units.ok() ? *units : units.status().ToString()) << "---- systemd log ----\n"
                << log.value_or("(none)") << "--------------------\n";
    }
    NodeIntegrationTest::TearDown();
  }

  std::vector<std::string> DaemonFlags() const override {
    return {"--session-launcher=systemd", "--systemd-bus-address=" + manager_->bus_address(),
            "--session-bundle-dir=" + root_ + "/bin"};
  }

  state::v1::VolumeRecord Record(const std::string& volume_id) const {
    state::v1::VolumeRecord record;
    auto text = ReadFileToString(
        JoinPath(daemon_->state_dir(), "volumes/" + Sha256Hex(volume_id) + ".json"));
    EXPECT_TRUE(text.ok()) << text.status();
    if (text.ok()) {
      EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(*text, &record).ok());
    }
    return record;
  }

  static UserSystemd* manager_;
  static std::string manager_root_;
};

UserSystemd* SystemdSessionTest::manager_ = nullptr;
std::string SystemdSessionTest::manager_root_;

TEST_F(SystemdSessionTest, SessionRunsInItsOwnUnitAndSurvivesTheAgentsUnitBeingStopped) {
  ASSERT_NE(manager_, nullptr);
  AddLun();
  // The agent's own cgroup, as a service's would be: stopping it kills every process in it.
  const std::string agent_scope = absl::StrCat("sh-agent-", tid_, ".scope");
  ASSERT_TRUE(manager_->AdoptIntoScope(agent_scope, daemon_->pid()).ok());

  const std::string target = root_ + "/pod1";
  auto st = Stage(StageRequest("vol-s"));
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_TRUE(Publish(PublishRequest("vol-s", target)).ok());

  const state::v1::UserspaceSessionRecord session = Record("vol-s").session().userspace();
  EXPECT_EQ(session.unit(), transport::userspace::SessionUnitName(session.runtime_dir()));
  ASSERT_GT(session.pid(), 0);
  auto cgroup = ReadFileToString(absl::StrCat("/proc/", session.pid(), "/cgroup"));
  ASSERT_TRUE(cgroup.ok());
  EXPECT_TRUE(absl::StrContains(*cgroup, session.unit())) << *cgroup;
  auto active = manager_->Systemctl({"is-active", session.unit()});
  EXPECT_TRUE(active.ok() && absl::StartsWith(*active, "active")) << active.status();
  // Started from the bundle under the bundle dir, not from the build tree.
  auto cmdline = ReadFileToString(absl::StrCat("/proc/", session.pid(), "/cmdline"));
  ASSERT_TRUE(cmdline.ok());
  EXPECT_TRUE(absl::StartsWith(*cmdline, root_ + "/bin/")) << *cmdline;

  // `systemctl stop` of the agent's unit: SIGTERM, then SIGKILL, to everything in its cgroup.
  auto stopped = manager_->Systemctl({"stop", agent_scope});
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  daemon_->Stop();
  EXPECT_TRUE(IsSameProcessAlive(session.pid(), session.start_time()))
      << "the session process must survive the agent's unit";
  EXPECT_TRUE(testbed::WriteDurably(target + "/while-agent-stopped", std::string(1 << 20, 's')))
      << "I/O must continue while the agent's unit is stopped";

  ASSERT_TRUE(daemon_->Start().ok());
  csi::v1::NodeGetVolumeStatsResponse stats;
  st = Stats("vol-s", target, &stats);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_FALSE(stats.volume_condition().abnormal()) << stats.volume_condition().message();
  EXPECT_TRUE(Unpublish("vol-s", target).ok());
  st = Unstage("vol-s", Staging("vol-s"));
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_FALSE(IsSameProcessAlive(session.pid(), session.start_time()));
  // Collected by systemd once it exited (CollectMode=inactive-or-failed).
  auto units = manager_->Systemctl({"list-units", "--all", "--plain", "stagehand-session-*"});
  ASSERT_TRUE(units.ok()) << units.status();
  EXPECT_FALSE(absl::StrContains(*units, session.unit())) << *units;
}

TEST_F(SystemdSessionTest, LoginFailureLeavesNoUnitBehind) {
  ASSERT_NE(manager_, nullptr);
  AddLun();
  auto req = StageRequest("vol-bad");
  (*req.mutable_volume_context())["lun"] = "7";  // No such LUN on the target.
  auto st = Stage(req);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
  auto units = manager_->Systemctl({"list-units", "--all", "--plain", "stagehand-session-*"});
  ASSERT_TRUE(units.ok()) << units.status();
  EXPECT_FALSE(absl::StrContains(*units, "stagehand-session-")) << *units;
}

// The host's dbus and systemd restart under a running agent (the bus socket is then a new one at
// the same path): the next session still starts, on a new connection.
TEST_F(SystemdSessionTest, SessionStartsAfterTheBusAndManagerRestart) {
  ASSERT_NE(manager_, nullptr);
  AddLun();
  auto st = Stage(StageRequest("vol-r1"));
  ASSERT_TRUE(st.ok()) << st.error_message();
  st = Unstage("vol-r1", Staging("vol-r1"));
  ASSERT_TRUE(st.ok()) << st.error_message();

  manager_->Stop();
  ASSERT_TRUE(manager_->Start(manager_root_ + "/xdg").ok());

  st = Stage(StageRequest("vol-r1"));
  ASSERT_TRUE(st.ok()) << st.error_message();
  const state::v1::UserspaceSessionRecord session = Record("vol-r1").session().userspace();
  auto active = manager_->Systemctl({"is-active", session.unit()});
  EXPECT_TRUE(active.ok() && absl::StartsWith(*active, "active")) << active.status();
  st = Unstage("vol-r1", Staging("vol-r1"));
  EXPECT_TRUE(st.ok()) << st.error_message();
}

// `systemctl kill --signal=KILL` of a session's unit (the OOM killer, a crash): systemd starts the
// unit again with what the session left in its file descriptor store, and the successor takes
// over the FUSE connection: same mount, same loop device, I/O goes on, unstage stops it for good.
TEST_F(SystemdSessionTest, AKilledSessionUnitIsRestartedAndTakesOverItsVolume) {
  ASSERT_NE(manager_, nullptr);
  AddLun();
  const std::string target = root_ + "/pod1";
  ASSERT_TRUE(Stage(StageRequest("vol-k")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-k", target)).ok());
  ASSERT_TRUE(testbed::WriteDurably(target + "/before", std::string(1 << 20, 'b')));
  const state::v1::UserspaceSessionRecord session = Record("vol-k").session().userspace();
  const std::string status_path = session.runtime_dir() + "/status";

  auto killed = manager_->Systemctl({"kill", "--signal=KILL", session.unit()});
  ASSERT_TRUE(killed.ok()) << killed.status();
  state::v1::SessionStatus status;
  const bool replaced =
      WaitUntilInDir(session.runtime_dir(), IN_MOVED_TO, std::chrono::seconds(60), [&] {
        auto raw = ReadFileToString(status_path);
        return raw.ok() && status.ParseFromString(*raw) && status.pid() != session.pid() &&
               status.took_over() && status.state() == state::v1::SessionStatus::UP;
      });

  ASSERT_TRUE(replaced) << status.DebugString();
  auto cgroup = ReadFileToString(absl::StrCat("/proc/", status.pid(), "/cgroup"));
  EXPECT_TRUE(cgroup.ok() && absl::StrContains(*cgroup, session.unit())) << "the same unit";
  EXPECT_TRUE(testbed::WriteDurably(target + "/after", std::string(1 << 20, 'a')));
  EXPECT_EQ(ReadFileToString(target + "/before").value_or(""), std::string(1 << 20, 'b'));
  csi::v1::NodeGetVolumeHealthResponse health;
  ASSERT_TRUE(Health("vol-k", &health).ok());
  EXPECT_EQ(health.volume_health().health_statuses_size(), 0) << health.DebugString();
  ASSERT_TRUE(Unpublish("vol-k", target).ok());
  ASSERT_TRUE(Unstage("vol-k", Staging("vol-k")).ok());
  auto active = manager_->Systemctl({"is-active", session.unit()});
  EXPECT_FALSE(active.ok() && absl::StartsWith(*active, "active")) << "stopped for good";
}

// `kill -9` of every stagehand process at once (the agent and the session: what `pkill -9
// stagehand` does on a node), ten times under fio with verification. The unit's descriptor store
// holds the FUSE connection, systemd restarts the session's unit, its successor takes over, and
// the agent comes back to find it serving: nothing fails, nothing moves.
TEST_F(SystemdSessionTest, KillingEveryStagehandProcessAtOnceUnderVerifiedWritesLosesNothing) {
  ASSERT_NE(manager_, nullptr);
  if (!HaveFio()) {
    GTEST_SKIP() << "fio is not installed";
  }
  AddLun();
  const std::string target = root_ + "/pod1";
  ASSERT_TRUE(Stage(StageRequest("vol-all")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-all", target)).ok());
  const std::string publish_mount = MountId(target);
  const auto loops = testbed::LoopsUnder(root_);
  const state::v1::UserspaceSessionRecord session = Record("vol-all").session().userspace();

  Fio fio(target + "/data", root_ + "/fio.json");
  ASSERT_TRUE(fio.running());
  for (int round = 0; round < 10; ++round) {
    const std::optional<state::v1::SessionStatus> before = SessionNow();
    ASSERT_TRUE(before.has_value() && before->pid() > 0) << "round " << round;
    const int pid = before->pid();
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    daemon_->Kill();
    ASSERT_TRUE(WaitForStatus([pid](const state::v1::SessionStatus& s) {
      return s.pid() != pid && s.took_over() && s.state() == state::v1::SessionStatus::UP;
    })) << "round "
        << round << ": no successor serves";
    const absl::Status started = daemon_->Start();
    ASSERT_TRUE(started.ok()) << "round " << round << ": " << started;
  }
  const auto report = fio.Stop();

  ASSERT_TRUE(report.has_value());
  const auto& job = FioJob(*report);
  EXPECT_EQ(FioNumber(job, "error"), 0) << "no write, fsync or verification failed";
  EXPECT_GT(FioNumber(job, "write", "io_bytes"), 0);
  EXPECT_EQ(MountId(target), publish_mount);
  EXPECT_EQ(testbed::LoopsUnder(root_), loops);
  csi::v1::NodeGetVolumeHealthResponse health;
  ASSERT_TRUE(Health("vol-all", &health).ok());
  EXPECT_EQ(health.volume_health().health_statuses_size(), 0) << health.DebugString();
  ASSERT_TRUE(Unpublish("vol-all", target).ok());
  ASSERT_TRUE(Unstage("vol-all", Staging("vol-all")).ok());
  auto active = manager_->Systemctl({"is-active", session.unit()});
  EXPECT_FALSE(active.ok() && absl::StartsWith(*active, "active")) << "stopped for good";
}

// Many distributions mount /run noexec: a bundle there could never run, so startup refuses it.
TEST(SessionBundleTest, ANoexecBundleDirectoryIsRefusedAtStartup) {
  if (!testbed::IntegrationEnabled()) {
    GTEST_SKIP() << "integration test: needs root and SH_INTEGRATION=1";
  }
  const std::string root = testbed::MakeTempRoot();
  const std::string noexec = root + "/noexec";
  ASSERT_TRUE(MakeDirs(noexec, 0755).ok());
  // Private to this test's mount namespace (see PrivateNamespaceEnvironment).
  ASSERT_EQ(mount("tmpfs", noexec.c_str(), "tmpfs", MS_NOEXEC, "mode=0755"), 0) << strerror(errno);

  auto run =
      RunProcess({testbed::StagehandBinary(), "--state-dir=" + root + "/state",
                  "--runtime-dir=" + root + "/run", "--csi-endpoint=unix://" + root + "/c.sock",
                  "--manifest-dir=" + root + "/manifests", "--metrics-address", "",
                  "--session-launcher=detached", "--session-bundle-dir=" + noexec});
  umount2(noexec.c_str(), MNT_DETACH);
  testbed::ForceCleanup(root);

  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->exit_code, 1) << run->output;
  EXPECT_THAT(run->output, ::testing::HasSubstr("mounted noexec")) << run->output;
}

}  // namespace
}  // namespace stagehand::testing

// A session process that dies (SIGKILL, as the OOM killer or a crash) or stops answering is
// replaced by its keeper, and the successor takes over the FUSE connection it left: the mount,
// the loop device, the filesystem and the publishes stay, and the volume's I/O stalls but never
// fails. A successor that cannot reach the target waits within the replacement timeout; one
// that finds another LUN fails closed.

#include <fcntl.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/escaping.h>
#include <absl/strings/match.h>
#include <gtest/gtest.h>

#include "base/build_id.h"
#include "base/file_io.h"
#include "base/paths.h"
#include "base/process.h"
#include "base/subprocess.h"
#include "proto/state.pb.h"
#include "session/counters_file.h"
#include "testbed/stagehand_daemon.h"
#include "tests/integration/fio.h"
#include "tests/integration/node_test_base.h"
#include "tests/testing/dir_watch.h"

namespace stagehand::testing {
namespace {

using state::v1::SessionStatus;

class SessionSuccessionTest : public NodeIntegrationTest {
 protected:
  std::vector<std::string> DaemonFlags() const override { return {"--session-watchdog=2"}; }

  // Kills the serving process with `signal` and waits until a successor serves (UP).
  bool KillAndWaitForSuccessor(int signal) const {
    auto before = SessionNow();
    if (!before || before->pid() <= 0) {
      return false;
    }
    const int pid = before->pid();
    kill(pid, signal);
    return WaitForStatus([pid](const SessionStatus& s) {
      return s.pid() != pid && s.took_over() && s.state() == SessionStatus::UP;
    });
  }
};

TEST_F(SessionSuccessionTest, TwentyKillsUnderVerifiedWritesLoseNothingAndMoveNothing) {
  if (!HaveFio()) {
    GTEST_SKIP() << "fio is not installed";
  }
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-kill")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-kill", target)).ok());
  const std::string staging_mount = MountId(Staging("vol-kill"));
  const std::string publish_mount = MountId(target);
  const auto loops = testbed::LoopsUnder(root_);
  ASSERT_EQ(loops.size(), 1u);
  ASSERT_EQ(testbed::KeeperPidsUnder(root_).size(), 1u);

  Fio fio(target + "/data", root_ + "/fio.json");
  ASSERT_TRUE(fio.running());
  for (int kill_number = 0; kill_number < 20; ++kill_number) {
    ASSERT_TRUE(KillAndWaitForSuccessor(SIGKILL)) << "kill " << kill_number;
  }
  // The last successor has served verification reads (direct I/O: from the LUN, not the page
  // cache) before fio stops.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (session::ReadCounters(SessionDir() + "/counters")
                 .value_or(session::DataPathCounters{})
                 .read_ops == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  const auto report = fio.Stop();

  ASSERT_TRUE(report.has_value());
  const auto& job = FioJob(*report);
  EXPECT_EQ(FioNumber(job, "error"), 0) << "no write, fsync or verification failed";
  EXPECT_GT(FioNumber(job, "write", "io_bytes"), 0);
  EXPECT_GT(FioNumber(job, "read", "io_bytes"), 0) << "written data was read back and verified";
  EXPECT_EQ(MountId(Staging("vol-kill")), staging_mount);
  EXPECT_EQ(MountId(target), publish_mount);
  EXPECT_EQ(testbed::LoopsUnder(root_), loops);
  csi::v1::NodeGetVolumeHealthResponse health;
  ASSERT_TRUE(Health("vol-kill", &health).ok());
  EXPECT_EQ(health.volume_health().health_statuses_size(), 0) << health.DebugString();
  EXPECT_TRUE(Unpublish("vol-kill", target).ok());
  EXPECT_TRUE(Unstage("vol-kill", Staging("vol-kill")).ok());
}

// The keeper (detached launcher) is killed, then the session, ten times over under fio: each
// time the session starts a keeper that adopts it at once, so the session's death that follows
// is survived as ever. Nothing fails, nothing moves, and unstage leaves no keeper behind.
TEST_F(SessionSuccessionTest, KeeperThenSessionKillsUnderVerifiedWritesLoseNothing) {
  if (!HaveFio()) {
    GTEST_SKIP() << "fio is not installed";
  }
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-keeper")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-keeper", target)).ok());
  const std::string publish_mount = MountId(target);
  const auto loops = testbed::LoopsUnder(root_);

  Fio fio(target + "/data", root_ + "/fio.json");
  ASSERT_TRUE(fio.running());
  for (int round = 0; round < 10; ++round) {
    const auto before = SessionNow();
    ASSERT_TRUE(before.has_value() && before->keeper_pid() > 0) << "round " << round;
    const auto keeper = static_cast<int>(before->keeper_pid());
    ASSERT_EQ(kill(keeper, SIGKILL), 0);
    std::optional<SessionStatus> adopted;
    ASSERT_TRUE(WaitForStatus([&](const SessionStatus& s) {
      adopted = s;
      return s.keeper_pid() > 0 && static_cast<int>(s.keeper_pid()) != keeper;
    })) << "round "
        << round << ": no keeper took the dead one's place";
    EXPECT_EQ(adopted->pid(), before->pid()) << "the session serves on under its new keeper";
    EXPECT_EQ(testbed::KeeperPidsUnder(root_),
              std::vector<int>{static_cast<int>(adopted->keeper_pid())});
    ASSERT_TRUE(KillAndWaitForSuccessor(SIGKILL)) << "round " << round;
  }
  const auto report = fio.Stop();

  ASSERT_TRUE(report.has_value());
  const auto& job = FioJob(*report);
  EXPECT_EQ(FioNumber(job, "error"), 0) << "no write, fsync or verification failed";
  EXPECT_GT(FioNumber(job, "write", "io_bytes"), 0);
  EXPECT_EQ(MountId(target), publish_mount);
  EXPECT_EQ(testbed::LoopsUnder(root_), loops);
  csi::v1::NodeGetVolumeHealthResponse health;
  ASSERT_TRUE(Health("vol-keeper", &health).ok());
  EXPECT_EQ(health.volume_health().health_statuses_size(), 0) << health.DebugString();
  EXPECT_TRUE(Unpublish("vol-keeper", target).ok());
  EXPECT_TRUE(Unstage("vol-keeper", Staging("vol-keeper")).ok());
  EXPECT_TRUE(testbed::RunningSessionKeepers().empty());
}

TEST_F(SessionSuccessionTest, ASuccessorWaitsForATargetThatIsDownThenServes) {
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-down")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-down", target)).ok());
  ASSERT_TRUE(testbed::WriteDurably(target + "/before", std::string(1 << 16, 'b')));
  const int pid = SessionNow()->pid();

  tgtd_->Kill();
  kill(pid, SIGKILL);
  ASSERT_TRUE(WaitForStatus([pid](const SessionStatus& s) {
    return s.pid() != pid && s.took_over() && s.state() == SessionStatus::RECONNECTING;
  })) << "the successor logs in meanwhile";
  auto writer = std::async(std::launch::async, [&] {
    return testbed::WriteDurably(target + "/during", std::string(1 << 16, 'd'));
  });
  ASSERT_TRUE(tgtd_->Restart().ok());

  EXPECT_TRUE(writer.get()) << "the write waited for the target and then went through";
  EXPECT_EQ(ReadFileToString(target + "/before").value_or(""), std::string(1 << 16, 'b'));
  EXPECT_TRUE(Unpublish("vol-down", target).ok());
  EXPECT_TRUE(Unstage("vol-down", Staging("vol-down")).ok());
}

// Successors keep counting the replacement timeout from when the connection was lost, so that
// kills (or watchdogs) during an outage never make I/O wait longer than the volume says.
TEST_F(SessionSuccessionTest, SuccessorsKeepTheReplacementTimeoutOfTheOutage) {
  AddLun();
  const std::string target = root_ + "/pod";
  auto req = StageRequest("vol-bound", /*block=*/true);
  (*req.mutable_volume_context())["replacementTimeout"] = "2";
  ASSERT_TRUE(Stage(req).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-bound", target, /*block=*/true)).ok());

  tgtd_->Kill();
  // A write waits on the outage while its session process is killed again and again (each
  // successor gets it resent): it must still fail once the outage is 2 s old.
  auto writer =
      std::async(std::launch::async, [&] { return testbed::WriteBlockDirect(target, 0, 'w'); });
  int kills = 0;
  while (writer.wait_for(std::chrono::seconds(0)) != std::future_status::ready && kills < 100) {
    const int pid = SessionNow()->pid();
    kill(pid, SIGKILL);
    ++kills;
    ASSERT_TRUE(WaitForStatus([pid](const SessionStatus& s) {
      return s.pid() != pid && s.state() == SessionStatus::RECONNECTING;
    })) << "kill "
        << kills;
  }

  ASSERT_EQ(writer.wait_for(std::chrono::seconds(0)), std::future_status::ready)
      << kills << " successors kept the write waiting";
  EXPECT_EQ(writer.get(), EIO) << "the outage's replacement timeout (2 s) bounds the wait";
  EXPECT_NE(SessionNow()->lost_since_ns(), 0u);
  ASSERT_TRUE(tgtd_->Restart().ok());
  EXPECT_TRUE(Unpublish("vol-bound", target).ok());
  EXPECT_TRUE(Unstage("vol-bound", Staging("vol-bound")).ok());
}

TEST_F(SessionSuccessionTest, ASuccessorThatFindsAnotherLunFailsClosed) {
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-other", /*block=*/true)).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-other", target, /*block=*/true)).ok());
  const std::string other = root_ + "/other.img";
  ASSERT_TRUE(testbed::MakeSparseFile(other, 128ull << 20).ok());
  const int pid = SessionNow()->pid();

  // The target comes back with another LUN under the same name and number while the session
  // process is being replaced.
  tgtd_->Kill();
  kill(pid, SIGKILL);
  ASSERT_TRUE(tgtd_->RestartEmpty().ok());
  ASSERT_TRUE(tgtd_->AddTargetWithSerial(tid_, Iqn(), 1, other, "someone-else").ok());
  ASSERT_TRUE(WaitForStatus([pid](const SessionStatus& s) {
    return s.pid() != pid && s.state() == SessionStatus::IDENTITY_MISMATCH;
  }));

  EXPECT_EQ(testbed::WriteBlockDirect(target, 4096, 'x'), EIO)
      << "I/O to a different LUN must fail";
  EXPECT_EQ(ReadFileToString(other).value_or("x").find('x'), std::string::npos);
  csi::v1::NodeGetVolumeHealthResponse health;
  ASSERT_TRUE(Health("vol-other", &health).ok());
  ASSERT_GE(health.volume_health().health_statuses_size(), 1) << health.DebugString();
  EXPECT_EQ(health.volume_health().health_statuses(0).reason(), "LunIdentityChanged");
  EXPECT_TRUE(Unpublish("vol-other", target).ok());
  EXPECT_TRUE(Unstage("vol-other", Staging("vol-other")).ok());
  (void)tgtd_->DeleteTarget(tid_);
}

TEST_F(SessionSuccessionTest, AStoppedSessionIsReplacedAfterItsWatchdogAndItsIoCompletes) {
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-stop", /*block=*/true)).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-stop", target, /*block=*/true)).ok());
  const int pid = SessionNow()->pid();

  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  absl::Cleanup resume = [pid] { kill(pid, SIGCONT); };
  // Waits on the stopped process until its successor answers it (the kernel resends it).
  auto writer =
      std::async(std::launch::async, [&] { return testbed::WriteBlockDirect(target, 0, 's'); });
  ASSERT_TRUE(WaitForStatus([pid](const SessionStatus& s) {
    return s.pid() != pid && s.took_over() && s.state() == SessionStatus::UP;
  })) << "the watchdog (2 s) replaced the stopped process";

  EXPECT_EQ(writer.get(), 0);
  EXPECT_EQ(ProcessStartTime(pid), 0u) << "the stopped process is gone";
  EXPECT_TRUE(Unpublish("vol-stop", target).ok());
  EXPECT_TRUE(Unstage("vol-stop", Staging("vol-stop")).ok());
}

// A copy of the session binary that reports another build: its GNU build ID changed, its code
// the same (what a package or image upgrade leaves running, as far as the agent can tell).
std::string OtherBuildOfSessionBinary(const std::string& dir) {
  const std::string original = JoinPath(ParentDir(testbed::StagehandBinary()), "stagehand-session");
  auto id = FileBuildId(original);
  auto bytes = ReadFileToString(original);
  if (!id.ok() || !bytes.ok()) {
    return "";
  }
  const std::string raw = absl::HexStringToBytes(*id);
  const size_t at = bytes->find(raw);
  if (at == std::string::npos) {
    return "";
  }
  (*bytes)[at] = static_cast<char>(~(*bytes)[at]);
  const std::string copy = dir + "/stagehand-session";
  return WriteFileAtomically(copy, *bytes, 0755).ok() ? copy : "";
}

TEST_F(SessionSuccessionTest, AnAgentOfAnotherBuildReplacesTheSessionInPlaceUnderVerifiedWrites) {
  if (!HaveFio()) {
    GTEST_SKIP() << "fio is not installed";
  }
  const std::string old_binary = OtherBuildOfSessionBinary(root_);
  ASSERT_FALSE(old_binary.empty());
  daemon_->Stop();
  daemon_->set_extra_flags({"--session-watchdog=2", "--session-binary=" + old_binary});
  ASSERT_TRUE(daemon_->Start().ok());
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-up")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-up", target)).ok());
  const auto before = SessionNow();
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->build(), FileBuildId(old_binary).value_or(""));
  const std::string staging_mount = MountId(Staging("vol-up"));
  const std::string publish_mount = MountId(target);
  const auto loops = testbed::LoopsUnder(root_);

  Fio fio(target + "/data", root_ + "/fio.json");
  ASSERT_TRUE(fio.running());
  // The agent of the current build starts (serving the driver only: it lists the driver's
  // volumes): it replaces the session of the old one in place.
  daemon_->Stop();
  daemon_->set_extra_flags({"--session-watchdog=2", "--no-watch-plugins"});
  ASSERT_TRUE(daemon_->Start().ok());
  const std::string current =
      FileBuildId(JoinPath(ParentDir(testbed::StagehandBinary()), "stagehand-session"))
          .value_or("");
  ASSERT_TRUE(WaitForStatus([&](const SessionStatus& s) {
    return s.build() == current && s.took_over() && s.state() == SessionStatus::UP;
  })) << "the session of the earlier build was replaced";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (session::ReadCounters(SessionDir() + "/counters")
                 .value_or(session::DataPathCounters{})
                 .read_ops == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  const auto report = fio.Stop();

  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(FioNumber(FioJob(*report), "error"), 0) << "no write, fsync or verification failed";
  EXPECT_EQ(ProcessStartTime(before->pid()), 0u) << "the old process is gone";
  EXPECT_EQ(MountId(Staging("vol-up")), staging_mount);
  EXPECT_EQ(MountId(target), publish_mount);
  EXPECT_EQ(testbed::LoopsUnder(root_), loops);
  auto listed = RunProcess({STAGEHANDCTL_BINARY, "--agent-socket",
                            daemon_->runtime_dir() + "/agent.sock", "agent", "volumes"});
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(absl::StrContains(listed->output, "build " + current.substr(0, 12)))
      << listed->output;
  EXPECT_FALSE(absl::StrContains(listed->output, "earlier build")) << listed->output;
  EXPECT_TRUE(Unpublish("vol-up", target).ok());
  EXPECT_TRUE(Unstage("vol-up", Staging("vol-up")).ok());
}

TEST_F(SessionSuccessionTest, AReplacementThatFailsLeavesTheOldProcessServing) {
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-stay")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-stay", target)).ok());
  const auto before = SessionNow();
  ASSERT_TRUE(before.has_value());

  // An agent whose session binary is of another build and cannot even start (it exits at
  // once): the replacement fails and the old process serves on.
  daemon_->Stop();
  daemon_->set_extra_flags(
      {"--session-watchdog=2", "--no-watch-plugins", "--session-binary=/bin/false"});
  ASSERT_TRUE(daemon_->Start().ok());
  ASSERT_TRUE(WaitUntilInDir(root_, IN_MODIFY, std::chrono::seconds(90), [&] {
    return absl::StrContains(ReadFileToString(root_ + "/daemon.log").value_or(""), "serves on");
  })) << "the agent tried and said so";

  EXPECT_EQ(SessionNow()->pid(), before->pid());
  EXPECT_TRUE(IsSameProcessAlive(before->pid(), before->start_time()));
  EXPECT_TRUE(testbed::WriteDurably(target + "/after", std::string(1 << 16, 'a')));
  auto listed = RunProcess({STAGEHANDCTL_BINARY, "--agent-socket",
                            daemon_->runtime_dir() + "/agent.sock", "agent", "volumes"});
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(absl::StrContains(listed->output, "earlier build")) << listed->output;
  EXPECT_TRUE(Unpublish("vol-stay", target).ok());
  EXPECT_TRUE(Unstage("vol-stay", Staging("vol-stay")).ok());
}

// The session binary replaced on disk by a broken one (a script exiting 1) while a volume is
// served: the keeper restarts the binary it started, not the broken one, and an agent started
// with the broken one says so in its status (it said "problems: none").
TEST_F(SessionSuccessionTest, ABrokenSessionBinaryIsFlaggedAndNeverRestartedInPlaceOfTheGoodOne) {
  const std::string binary = root_ + "/stagehand-session";
  const auto good =
      ReadFileToString(JoinPath(ParentDir(testbed::StagehandBinary()), "stagehand-session"));
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE(WriteFileAtomically(binary, *good, 0755).ok());
  const std::vector<std::string> flags = {"--session-watchdog=2", "--session-binary=" + binary};
  daemon_->Stop();
  daemon_->set_extra_flags(flags);
  ASSERT_TRUE(daemon_->Start().ok());
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-bin")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-bin", target)).ok());
  ASSERT_TRUE(testbed::WriteDurably(target + "/before", "before\n"));

  ASSERT_TRUE(WriteFileAtomically(binary, "#!/bin/sh\nexit 1\n", 0755).ok());
  ASSERT_TRUE(KillAndWaitForSuccessor(SIGKILL)) << "the keeper restarted the good binary";
  EXPECT_TRUE(testbed::WriteDurably(target + "/after", "after\n"));
  EXPECT_EQ(ReadFileToString(target + "/before").value_or(""), "before\n");

  daemon_->Stop();
  ASSERT_TRUE(daemon_->Start().ok());
  auto status = RunProcess({STAGEHANDCTL_BINARY, "--agent-socket",
                            daemon_->runtime_dir() + "/agent.sock", "agent", "status"});
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(absl::StrContains(status->output, "does not run as a stagehand session"))
      << status->output;
  EXPECT_TRUE(Unpublish("vol-bin", target).ok());
  EXPECT_TRUE(Unstage("vol-bin", Staging("vol-bin")).ok());
}

}  // namespace
}  // namespace stagehand::testing

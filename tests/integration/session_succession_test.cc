// A session process that dies (SIGKILL, as the OOM killer or a crash) or stops answering is
// replaced by its keeper, and the successor takes over the FUSE connection it left: the mount,
// the loop device, the filesystem and the publishes stay, and the volume's I/O stalls but never
// fails. A successor that cannot reach the target waits within the replacement timeout; one
// that finds another LUN fails closed.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/str_split.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/process.h"
#include "base/spawn.h"
#include "base/subprocess.h"
#include "iscsi/datapath_counters.h"
#include "proto/state.pb.h"
#include "tests/integration/cluster.h"
#include "tests/integration/node_test_base.h"
#include "tests/testing/dir_watch.h"

namespace stagehand::testing {
namespace {

using state::v1::SessionStatus;

// The mount id of `path` in /proc/self/mountinfo ("" when not a mount point).
std::string MountId(const std::string& path) {
  auto text = ReadFileToString("/proc/self/mountinfo");
  for (absl::string_view line : absl::StrSplit(text.value_or(""), '\n')) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 4 && fields[4] == path) {
      return std::string(fields[0]);
    }
  }
  return "";
}

// fio writing and verifying a file until stopped.
class Fio {
 public:
  Fio(const std::string& file, const std::string& output) : output_(output) {
    const std::vector<std::string> argv = {
        "/usr/bin/fio",    "--name=succession",    "--filename=" + file, "--size=32M",
        "--bs=4k",         "--rw=randwrite",       "--ioengine=psync",   "--fsync=8",
        "--verify=crc32c", "--verify_backlog=256", "--verify_fatal=1",   "--time_based",
        "--runtime=3600",  "--output-format=json", "--output=" + output};
    std::vector<char*> cargv = SpawnArgv(argv);
    if (posix_spawn(&pid_, cargv[0], nullptr, nullptr, cargv.data(), environ) != 0) {
      pid_ = -1;
    }
  }

  ~Fio() { (void)Stop(); }

  Fio(const Fio&) = delete;
  Fio& operator=(const Fio&) = delete;

  bool running() const { return pid_ > 0; }

  // Stops it (SIGINT: it finishes the verification in flight and reports) and returns its
  // report; nullopt when there was none.
  std::optional<google::protobuf::Struct> Stop() {
    if (pid_ <= 0) {
      return std::nullopt;
    }
    kill(pid_, SIGINT);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    auto text = ReadFileToString(output_);
    if (!text.ok() || text->find('{') == std::string::npos) {
      return std::nullopt;
    }
    google::protobuf::Struct report;
    if (!google::protobuf::util::JsonStringToMessage(text->substr(text->find('{')), &report).ok()) {
      return std::nullopt;
    }
    return report;
  }

 private:
  std::string output_;
  pid_t pid_ = -1;
};

const google::protobuf::Struct& Job(const google::protobuf::Struct& report) {
  return report.fields().at("jobs").list_value().values(0).struct_value();
}

double Number(const google::protobuf::Struct& s, const std::string& a, const std::string& b = "") {
  const auto& v = s.fields().at(a);
  return b.empty() ? v.number_value() : v.struct_value().fields().at(b).number_value();
}

class SessionSuccessionTest : public NodeIntegrationTest {
 protected:
  std::vector<std::string> DaemonFlags() const override { return {"--session-watchdog=2"}; }

  std::string SessionDir() const {
    auto out = RunProcess({"ls", daemon_->runtime_dir() + "/sessions"});
    return daemon_->runtime_dir() + "/sessions/" +
           (out.ok() ? out->output.substr(0, out->output.find('\n')) : "");
  }

  std::optional<SessionStatus> SessionNow() const {
    auto raw = ReadFileToString(SessionDir() + "/status");
    SessionStatus status;
    if (!raw.ok() || !status.ParseFromString(*raw)) {
      return std::nullopt;
    }
    return status;
  }

  // Waits (inotify on the session's directory) until its status satisfies `done`.
  bool WaitForStatus(const std::function<bool(const SessionStatus&)>& done) const {
    return WaitUntilInDir(SessionDir(), IN_MOVED_TO, std::chrono::seconds(60), [&] {
      auto status = SessionNow();
      return status.has_value() && done(*status);
    });
  }

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
  if (access("/usr/bin/fio", X_OK) != 0) {
    GTEST_SKIP() << "fio is not installed";
  }
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-kill")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-kill", target)).ok());
  const std::string staging_mount = MountId(Staging("vol-kill"));
  const std::string publish_mount = MountId(target);
  const auto loops = LoopsUnder(root_);
  ASSERT_EQ(loops.size(), 1u);
  ASSERT_EQ(KeeperPidsUnder(root_).size(), 1u);

  Fio fio(target + "/data", root_ + "/fio.json");
  ASSERT_TRUE(fio.running());
  for (int kill_number = 0; kill_number < 20; ++kill_number) {
    ASSERT_TRUE(KillAndWaitForSuccessor(SIGKILL)) << "kill " << kill_number;
  }
  // The last successor has served verification reads (direct I/O: from the LUN, not the page
  // cache) before fio stops.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (iscsi::ReadCounters(SessionDir() + "/counters")
                 .value_or(iscsi::DataPathCounters{})
                 .read_ops == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  const auto report = fio.Stop();

  ASSERT_TRUE(report.has_value());
  const auto& job = Job(*report);
  EXPECT_EQ(Number(job, "error"), 0) << "no write, fsync or verification failed";
  EXPECT_GT(Number(job, "write", "io_bytes"), 0);
  EXPECT_GT(Number(job, "read", "io_bytes"), 0) << "written data was read back and verified";
  EXPECT_EQ(MountId(Staging("vol-kill")), staging_mount);
  EXPECT_EQ(MountId(target), publish_mount);
  EXPECT_EQ(LoopsUnder(root_), loops);
  csi::v1::NodeGetVolumeHealthResponse health;
  ASSERT_TRUE(Health("vol-kill", &health).ok());
  EXPECT_EQ(health.volume_health().health_statuses_size(), 0) << health.DebugString();
  EXPECT_TRUE(Unpublish("vol-kill", target).ok());
  EXPECT_TRUE(Unstage("vol-kill", Staging("vol-kill")).ok());
}

TEST_F(SessionSuccessionTest, ASuccessorWaitsForATargetThatIsDownThenServes) {
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-down")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-down", target)).ok());
  ASSERT_TRUE(WriteDurably(target + "/before", std::string(1 << 16, 'b')));
  const int pid = SessionNow()->pid();

  tgtd_->Kill();
  kill(pid, SIGKILL);
  ASSERT_TRUE(WaitForStatus([pid](const SessionStatus& s) {
    return s.pid() != pid && s.took_over() && s.state() == SessionStatus::RECONNECTING;
  })) << "the successor logs in meanwhile";
  auto writer = std::async(std::launch::async, [&] {
    return WriteDurably(target + "/during", std::string(1 << 16, 'd'));
  });
  ASSERT_TRUE(tgtd_->Restart().ok());

  EXPECT_TRUE(writer.get()) << "the write waited for the target and then went through";
  EXPECT_EQ(ReadFileToString(target + "/before").value_or(""), std::string(1 << 16, 'b'));
  EXPECT_TRUE(Unpublish("vol-down", target).ok());
  EXPECT_TRUE(Unstage("vol-down", Staging("vol-down")).ok());
}

TEST_F(SessionSuccessionTest, ASuccessorThatFindsAnotherLunFailsClosed) {
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-other", /*block=*/true)).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-other", target, /*block=*/true)).ok());
  const std::string other = root_ + "/other.img";
  ASSERT_TRUE(MakeSparseFile(other, 128ull << 20).ok());
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

  EXPECT_EQ(WriteBlockDirect(target, 4096, 'x'), EIO) << "I/O to a different LUN must fail";
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
  auto writer = std::async(std::launch::async, [&] { return WriteBlockDirect(target, 0, 's'); });
  ASSERT_TRUE(WaitForStatus([pid](const SessionStatus& s) {
    return s.pid() != pid && s.took_over() && s.state() == SessionStatus::UP;
  })) << "the watchdog (2 s) replaced the stopped process";

  EXPECT_EQ(writer.get(), 0);
  EXPECT_EQ(ProcessStartTime(pid), 0u) << "the stopped process is gone";
  EXPECT_TRUE(Unpublish("vol-stop", target).ok());
  EXPECT_TRUE(Unstage("vol-stop", Staging("vol-stop")).ok());
}

}  // namespace
}  // namespace stagehand::testing

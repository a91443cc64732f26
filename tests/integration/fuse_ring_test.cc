// FUSE over io_uring (--fuse-io-uring): where the kernel offers it (Linux 6.14+, the module
// parameter fuse.enable_uring set), the session takes its requests through a ring; where it
// does not, the classic loop serves and the status says why. A successor of a ring session
// that died registers a ring of its own and serves new I/O.

#include <fcntl.h>
#include <linux/fs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <optional>
#include <string>
#include <thread>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/match.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/unique_fd.h"
#include "proto/state.pb.h"
#include "session/counters_file.h"
#include "session/protocol.h"
#include "testbed/stagehand_daemon.h"
#include "tests/integration/node_test_base.h"

namespace stagehand::testing {
namespace {

using state::v1::SessionStatus;
using ::testing::HasSubstr;

constexpr char kUringParameter[] = "/sys/module/fuse/parameters/enable_uring";

// Sets fuse.enable_uring for the test and puts the old value back.
class UringParameter {
 public:
  explicit UringParameter(bool on) {
    auto old = ReadFileToString(kUringParameter);
    if (!old.ok()) {
      return;
    }
    old_ = old->substr(0, 1);
    ok_ = testbed::WriteControl(kUringParameter, on ? "Y" : "N");
  }

  ~UringParameter() {
    if (!old_.empty()) {
      testbed::WriteControl(kUringParameter, old_);
    }
  }

  UringParameter(const UringParameter&) = delete;
  UringParameter& operator=(const UringParameter&) = delete;

  bool ok() const { return ok_; }

 private:
  std::string old_;
  bool ok_ = false;
};

// Writes `content` to `path` durably, drops the page cache and reads it back (from the LUN).
std::string WriteAndReadBack(const std::string& path, const std::string& content) {
  if (!testbed::WriteDurably(path, content)) {
    return "<write failed>";
  }
  testbed::WriteControl("/proc/sys/vm/drop_caches", "3");
  return ReadFileToString(path).value_or("<read failed>");
}

class FuseRingTest : public NodeIntegrationTest {
 protected:
  std::vector<std::string> DaemonFlags() const override {
    return {"--fuse-io-uring", "--session-watchdog=2"};
  }

  void SetUp() override {
    NodeIntegrationTest::SetUp();
    if (access(kUringParameter, W_OK) != 0) {
      GTEST_SKIP() << "this kernel has no FUSE over io_uring (" << kUringParameter << ")";
    }
  }
};

TEST_F(FuseRingTest, AVolumeServedThroughTheRingKeepsItsDataAcrossAKilledSession) {
  UringParameter uring(true);
  ASSERT_TRUE(uring.ok());
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-ring")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-ring", target)).ok());
  auto before = SessionNow();
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->fuse_mode(), "io_uring");

  const std::string data(3 << 20, 'r');
  EXPECT_EQ(WriteAndReadBack(target + "/a", data), data);
  const auto counters = session::ReadCounters(SessionDir() + "/counters");
  ASSERT_TRUE(counters.ok());
  EXPECT_GT(counters->write_ops, 0u);
  EXPECT_GT(counters->read_ops, 0u) << "read back from the LUN, through the ring";

  // Killed with nothing in flight: the successor registers a ring of its own and serves. The
  // filesystem is frozen first (FIFREEZE writes everything back, waits for it and holds back
  // the journal's commits): a commit that happened to sit in the ring at the kill would never
  // be resent, and the test's next fsync would wait for it for good (the next test is about
  // that case).
  UniqueFd mounted(open(target.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(mounted.Valid());
  ASSERT_EQ(ioctl(mounted.Get(), FIFREEZE, 0), 0) << strerror(errno);
  // Thawed, and the descriptor closed (an open directory keeps the unmount busy).
  absl::Cleanup thaw = [&] {
    (void)ioctl(mounted.Get(), FITHAW, 0);
    mounted.Reset();
  };
  const int pid = before->pid();
  kill(pid, SIGKILL);
  ASSERT_TRUE(WaitForStatus([pid](const SessionStatus& s) {
    return s.pid() != pid && s.took_over() && s.state() == SessionStatus::UP;
  }));
  std::move(thaw).Invoke();
  EXPECT_EQ(SessionNow()->fuse_mode(), "io_uring");
  EXPECT_EQ(ReadFileToString(target + "/a").value_or(""), data);
  EXPECT_EQ(WriteAndReadBack(target + "/b", data), data);

  EXPECT_TRUE(Unpublish("vol-ring", target).ok());
  EXPECT_TRUE(Unstage("vol-ring", Staging("vol-ring")).ok());
}

// A session killed while its ring holds a request (the target frozen, so the write waits in the
// session): the kernel never resends what a dead ring held. The successor serves new I/O and the
// volume shows FuseRequestsLost at once, naming the file that aborts the connection; after the
// abort the waiting write fails instead of hanging, and unpublish and unstage leave nothing.
TEST_F(FuseRingTest, RequestsADeadRingHeldAreShownAndAnAbortEndsTheirWait) {
  UringParameter uring(true);
  ASSERT_TRUE(uring.ok());
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-lost", /*block=*/true)).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-lost", target, /*block=*/true)).ok());
  const std::optional<SessionStatus> first = SessionNow();
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->fuse_mode(), "io_uring");
  const std::string counters = session::RuntimePath(SessionDir(), session::kCountersFile);
  const std::string fuse_mount = session::RuntimePath(SessionDir(), session::kMountDir);

  absl::Cleanup thaw = [] { ThawTarget(); };
  ASSERT_NO_FATAL_FAILURE(FreezeTarget());
  auto held =
      std::async(std::launch::async, [&] { return testbed::WriteBlockDirect(target, 0, 'w'); });
  // Whatever happens below, nothing is left waiting on the dead ring (the future's destructor
  // would wait for it).
  absl::Cleanup end_wait = [&] {
    if (held.valid() && held.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      (void)testbed::AbortFuseConnection(fuse_mount);
    }
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (session::ReadCounters(counters).value_or(session::DataPathCounters{}).ring_held == 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the write never reached the ring";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // Polls the session's gauge.
  }
  ASSERT_EQ(kill(first->pid(), SIGKILL), 0);
  std::move(thaw).Invoke();

  std::optional<SessionStatus> successor;
  ASSERT_TRUE(WaitForStatus([&](const SessionStatus& s) {
    successor = s;
    return s.pid() != first->pid() && s.state() == SessionStatus::UP;
  }));
  EXPECT_GE(successor->lost_ring_requests(), 1u) << successor->DebugString();
  // Shown once the successor serves again (while it logs in again after the thaw, the volume
  // says SessionReconnecting instead: a status has one state).
  csi::v1::NodeGetVolumeHealthResponse health;
  const auto shown = [&] {
    health.Clear();
    if (!Health("vol-lost", &health).ok()) {
      return false;
    }
    const auto& statuses = health.volume_health().health_statuses();
    return std::any_of(statuses.begin(), statuses.end(),
                       [](const auto& h) { return h.reason() == "FuseRequestsLost"; });
  };
  const auto shown_by = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!shown()) {
    ASSERT_LT(std::chrono::steady_clock::now(), shown_by) << health.DebugString();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // Polls the health call.
  }
  const auto& statuses = health.volume_health().health_statuses();
  const auto lost = std::find_if(statuses.begin(), statuses.end(),
                                 [](const auto& h) { return h.reason() == "FuseRequestsLost"; });
  ASSERT_NE(lost, statuses.end()) << health.DebugString();
  EXPECT_THAT(lost->message(), HasSubstr("/sys/fs/fuse/connections/"));
  EXPECT_NE(held.wait_for(std::chrono::seconds(0)), std::future_status::ready)
      << "a write the dead ring held completed";
  auto fresh = std::async(std::launch::async,
                          [&] { return testbed::WriteBlockDirect(target, 1 << 20, 'n'); });
  ASSERT_EQ(fresh.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "the successor does not serve new I/O";
  EXPECT_EQ(fresh.get(), 0);

  const absl::Status aborted = testbed::AbortFuseConnection(fuse_mount);
  ASSERT_TRUE(aborted.ok()) << aborted;
  ASSERT_EQ(held.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "the abort did not end the wait";
  EXPECT_NE(held.get(), 0) << "the lost write cannot have succeeded";
  EXPECT_TRUE(Unpublish("vol-lost", target).ok());
  const grpc::Status unstaged = Unstage("vol-lost", Staging("vol-lost"));
  EXPECT_TRUE(unstaged.ok()) << unstaged.error_message();
}

TEST_F(FuseRingTest, WithoutTheModuleParameterTheClassicLoopServesAndSaysWhy) {
  UringParameter uring(false);
  ASSERT_TRUE(uring.ok());
  AddLun();
  const std::string target = root_ + "/pod";
  ASSERT_TRUE(Stage(StageRequest("vol-classic")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-classic", target)).ok());
  auto status = SessionNow();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(absl::StartsWith(status->fuse_mode(), "classic (io_uring: ")) << status->fuse_mode();
  EXPECT_TRUE(absl::StrContains(status->fuse_mode(), "fuse.enable_uring")) << status->fuse_mode();

  const std::string data(1 << 20, 'c');
  EXPECT_EQ(WriteAndReadBack(target + "/a", data), data);
  EXPECT_TRUE(Unpublish("vol-classic", target).ok());
  EXPECT_TRUE(Unstage("vol-classic", Staging("vol-classic")).ok());
}

}  // namespace
}  // namespace stagehand::testing

// A session process that runs but answers nothing (deadlocked, or frozen as here by the cgroup
// v1 freezer: its state is not 'T', so it is not "stopped") while I/O waits on it: the volume is
// reported SessionNotAnswering after the stall timeout, from the loop device's counters alone,
// and healthy again once it completes I/O; with no I/O waiting, from its heartbeat.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <string>
#include <thread>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/str_split.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/process.h"
#include "testbed/stagehand_daemon.h"
#include "tests/integration/node_test_base.h"

namespace stagehand::testing {
namespace {

constexpr char kFreezer[] = "/sys/fs/cgroup/freezer";

// Every thread of `pid` frozen in a cgroup of its own; thawed, moved back and the cgroup removed
// when destroyed.
class Frozen {
 public:
  explicit Frozen(int pid)
      : dir_(std::string(kFreezer) + "/stagehand-test-" + std::to_string(pid)) {
    ok_ = mkdir(dir_.c_str(), 0755) == 0 &&
          testbed::WriteControl(dir_ + "/cgroup.procs", std::to_string(pid)) &&
          testbed::WriteControl(dir_ + "/freezer.state", "FROZEN");
  }

  ~Frozen() {
    testbed::WriteControl(dir_ + "/freezer.state", "THAWED");
    auto procs = ReadFileToString(dir_ + "/cgroup.procs");
    for (absl::string_view p : absl::StrSplit(procs.value_or(""), '\n', absl::SkipEmpty())) {
      testbed::WriteControl(std::string(kFreezer) + "/cgroup.procs", std::string(p));
    }
    rmdir(dir_.c_str());
  }

  Frozen(const Frozen&) = delete;
  Frozen& operator=(const Frozen&) = delete;

  bool ok() const { return ok_; }

  bool frozen() const {
    return ReadFileToString(dir_ + "/freezer.state").value_or("").starts_with("FROZEN");
  }

 private:
  std::string dir_;
  bool ok_ = false;
};

class SessionStallTest : public NodeIntegrationTest {
 protected:
  std::vector<std::string> DaemonFlags() const override { return {"--session-stall-timeout=1"}; }

  std::string Reason(const std::string& volume_id) {
    csi::v1::NodeGetVolumeHealthResponse health;
    if (!Health(volume_id, &health).ok()) {
      return "(no answer)";
    }
    const auto& statuses = health.volume_health().health_statuses();
    return statuses.empty() ? "" : statuses[0].reason();
  }
};

TEST_F(SessionStallTest, ASessionThatRunsButAnswersNothingIsReportedNotAnswering) {
  if (access(kFreezer, W_OK) != 0) {
    GTEST_SKIP() << "no cgroup v1 freezer at " << kFreezer;
  }
  AddLun();
  const std::string target = root_ + "/pod1";
  ASSERT_TRUE(Stage(StageRequest("vol-stall", /*block=*/true)).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-stall", target, /*block=*/true)).ok());
  const std::vector<int> pids = testbed::SessionPidsUnder(root_);
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_EQ(Reason("vol-stall"), "");

  std::optional<Frozen> frozen;
  frozen.emplace(pids[0]);
  ASSERT_TRUE(frozen->ok());
  int written = -1;
  std::thread writer;
  // Whatever fails below: thaw first, so that the write completes and nothing stays hung.
  absl::Cleanup thaw = [&] {
    frozen.reset();
    if (writer.joinable()) {
      writer.join();
    }
  };
  while (!frozen->frozen()) {
    std::this_thread::yield();
  }
  EXPECT_NE(ProcessState(pids[0]), 'T');
  writer = std::thread([&] { written = testbed::WriteBlockDirect(target, 4096, 'y'); });

  // Each answer reads sysfs only; the stall shows once the timeout has passed after a look that
  // saw the write waiting.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string reason;
  while ((reason = Reason("vol-stall")) != "SessionNotAnswering" &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(reason, "SessionNotAnswering");

  frozen.reset();
  writer.join();
  EXPECT_EQ(written, 0);
  EXPECT_EQ(Reason("vol-stall"), "");
  EXPECT_TRUE(Unpublish("vol-stall", target).ok());
  EXPECT_TRUE(Unstage("vol-stall", Staging("vol-stall")).ok());
}

TEST_F(SessionStallTest, AFrozenSessionIsReportedNotAnsweringWithNoIoWaiting) {
  if (access(kFreezer, W_OK) != 0) {
    GTEST_SKIP() << "no cgroup v1 freezer at " << kFreezer;
  }
  AddLun();
  ASSERT_TRUE(Stage(StageRequest("vol-idle", /*block=*/true)).ok());
  const std::vector<int> pids = testbed::SessionPidsUnder(root_);
  ASSERT_EQ(pids.size(), 1u);
  EXPECT_EQ(Reason("vol-idle"), "");

  std::optional<Frozen> frozen;
  frozen.emplace(pids[0]);
  ASSERT_TRUE(frozen->ok());
  // Nothing waits on the loop device, so only the heartbeat (5 s by default) can tell.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string reason;
  while ((reason = Reason("vol-idle")) != "SessionNotAnswering" &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }

  EXPECT_EQ(reason, "SessionNotAnswering");
  frozen.reset();
  while ((reason = Reason("vol-idle")) == "SessionNotAnswering" &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(reason, "");
  EXPECT_TRUE(Unstage("vol-idle", Staging("vol-idle")).ok());
}

}  // namespace
}  // namespace stagehand::testing

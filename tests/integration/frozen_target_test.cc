// A target that freezes (a hung target host, a paused VM, tgtd stopped): its TCP connections
// stay open and nothing comes back, not even an error. The session finds it silent (NOP-Outs and
// commands unanswered), counts the replacement timeout from the first answer it was owed, and a
// session process killed meanwhile hands that origin on to its successor. Here tgtd is stopped
// with SIGSTOP (and always continued, even when a test fails).

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <absl/cleanup/cleanup.h>
#include <gtest/gtest.h>

#include "proto/state.pb.h"
#include "testbed/stagehand_daemon.h"
#include "tests/integration/node_test_base.h"

namespace stagehand::testing {
namespace {

using state::v1::SessionStatus;

class FrozenTargetTest : public NodeIntegrationTest {
 protected:
  std::vector<std::string> DaemonFlags() const override { return {"--no-watch-plugins"}; }

  // Stages and publishes a raw block volume with the given replacement timeout at pod1.
  std::string StageBlock(const std::string& volume_id, int replacement_timeout_s) {
    AddLun();
    auto req = StageRequest(volume_id, /*block=*/true);
    (*req.mutable_volume_context())["replacementTimeout"] = std::to_string(replacement_timeout_s);
    std::string target = root_ + "/pod1";
    EXPECT_TRUE(Stage(req).ok());
    EXPECT_TRUE(Publish(PublishRequest(volume_id, target, /*block=*/true)).ok());
    EXPECT_EQ(testbed::WriteBlockDirect(target, 0, 'a'), 0) << "I/O before the freeze";
    return target;
  }

  // Waits until the session says the target owes it an answer; that origin (0 on timeout).
  uint64_t WaitUntilSilent() {
    uint64_t since = 0;
    EXPECT_TRUE(WaitForStatus([&](const SessionStatus& s) {
      since = s.silent_since_ns();
      return since != 0;
    })) << "the session never noticed that the target stopped answering";
    return since;
  }
};

// A frozen target with a short replacement timeout: I/O fails with EIO while the target is
// still frozen (it does not wait for a TCP error that never comes), the timeout counted from
// the first unanswered request; once the target runs again, I/O works again.
TEST_F(FrozenTargetTest, IoFailsAfterTheReplacementTimeoutWhileTheTargetIsStillFrozen) {
  const std::string target = StageBlock("vol-frozen", 5);
  absl::Cleanup thaw = [] { ThawTarget(); };
  ASSERT_NO_FATAL_FAILURE(FreezeTarget());
  const uint64_t silent_since = WaitUntilSilent();

  auto io =
      std::async(std::launch::async, [&] { return testbed::WriteBlockDirect(target, 0, 'f'); });
  const bool finished = io.wait_for(std::chrono::seconds(120)) == std::future_status::ready;
  std::optional<SessionStatus> during = SessionNow();
  csi::v1::NodeGetVolumeHealthResponse health;
  const grpc::Status health_status = Health("vol-frozen", &health);
  std::move(thaw).Invoke();  // The target runs again (and a hung write can finish).
  const int err = io.get();

  ASSERT_TRUE(finished) << "I/O hung on a frozen target";
  EXPECT_EQ(err, EIO);
  ASSERT_TRUE(during.has_value());
  EXPECT_TRUE(during->io_failing()) << during->DebugString();
  EXPECT_EQ(during->lost_since_ns(), silent_since)
      << "the replacement timeout counts from the first unanswered request";
  ASSERT_TRUE(health_status.ok()) << health_status.error_message();
  ASSERT_GE(health.volume_health().health_statuses_size(), 1) << health.DebugString();
  EXPECT_EQ(health.volume_health().health_statuses(0).reason(), "ReplacementTimeoutPassed");

  EXPECT_TRUE(WaitForStatus([](const SessionStatus& s) { return s.state() == SessionStatus::UP; }));
  EXPECT_EQ(testbed::WriteBlockDirect(target, 0, 'g'), 0) << "I/O works again after the thaw";
  EXPECT_TRUE(Unpublish("vol-frozen", target).ok());
  EXPECT_TRUE(Unstage("vol-frozen", Staging("vol-frozen")).ok());
}

// A freeze shorter than the replacement timeout under a writer: the session finds the target
// silent and replaces the connection, and once the target runs again every write completes;
// none fails.
TEST_F(FrozenTargetTest, AShortFreezeIsDetectedAndRiddenOutWithoutAFailedWrite) {
  const std::string target = StageBlock("vol-short", 60);
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::mutex mu;
  std::condition_variable wrote;
  int writes = 0;  // Guarded by mu.
  const auto writes_now = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return writes;
  };
  std::thread writer([&] {
    for (off_t block = 0; !stop; block = (block + 1) % 64) {
      if (testbed::WriteBlockDirect(target, block * 4096, static_cast<char>('a' + block % 26)) !=
          0) {
        ++failures;
        continue;
      }
      std::lock_guard<std::mutex> lock(mu);
      ++writes;
      wrote.notify_all();
    }
  });
  absl::Cleanup join = [&] {
    stop = true;
    writer.join();
  };

  absl::Cleanup thaw = [] { ThawTarget(); };
  ASSERT_NO_FATAL_FAILURE(FreezeTarget());
  WaitUntilSilent();
  EXPECT_TRUE(WaitForStatus([](const SessionStatus& s) {
    return s.state() == SessionStatus::RECONNECTING;
  })) << "a frozen target was never taken for lost";
  const int before_thaw = writes_now();
  std::move(thaw).Invoke();
  EXPECT_TRUE(WaitForStatus([](const SessionStatus& s) { return s.state() == SessionStatus::UP; }));
  std::optional<SessionStatus> after = SessionNow();
  {
    // Writes go on after the reconnect: the one held over the freeze and more.
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(wrote.wait_for(lock, std::chrono::seconds(60), [&] {
      return writes >= before_thaw + 3;
    })) << "writes did not go on after the thaw";
  }
  std::move(join).Invoke();

  EXPECT_EQ(failures.load(), 0) << "a write failed during a freeze shorter than the timeout";
  ASSERT_TRUE(after.has_value());
  EXPECT_FALSE(after->io_failing());
  EXPECT_GE(after->reconnects(), 1u);
  EXPECT_TRUE(Unpublish("vol-short", target).ok());
  EXPECT_TRUE(Unstage("vol-short", Staging("vol-short")).ok());
}

// A session process killed while its target is frozen: the successor that takes over the FUSE
// connection counts the replacement timeout from when the target went silent, as the process
// before it did, not from its own start.
TEST_F(FrozenTargetTest, ASuccessorKeepsTheOriginOfTheReplacementTimeout) {
  const std::string target = StageBlock("vol-succ", 60);
  absl::Cleanup thaw = [] { ThawTarget(); };
  ASSERT_NO_FATAL_FAILURE(FreezeTarget());
  const uint64_t silent_since = WaitUntilSilent();
  const std::optional<SessionStatus> first = SessionNow();
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(kill(static_cast<pid_t>(first->pid()), SIGKILL), 0);

  std::optional<SessionStatus> successor;
  EXPECT_TRUE(WaitForStatus([&](const SessionStatus& s) {
    successor = s;
    return s.pid() != first->pid() && s.lost_since_ns() != 0;
  })) << "no successor reported the lost connection";
  ASSERT_TRUE(successor.has_value());
  EXPECT_TRUE(successor->took_over());
  EXPECT_EQ(successor->lost_since_ns(), silent_since)
      << "the successor restarted the replacement timeout";

  std::move(thaw).Invoke();
  EXPECT_TRUE(WaitForStatus([](const SessionStatus& s) { return s.state() == SessionStatus::UP; }));
  EXPECT_EQ(testbed::WriteBlockDirect(target, 0, 'h'), 0) << "I/O works after the thaw";
  EXPECT_TRUE(Unpublish("vol-succ", target).ok());
  EXPECT_TRUE(Unstage("vol-succ", Staging("vol-succ")).ok());
}

}  // namespace
}  // namespace stagehand::testing

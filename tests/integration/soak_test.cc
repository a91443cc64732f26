// A soak test of the built-in driver against a real tgtd: rounds of stage, publish, write with
// fsync, a random fault, repeated calls, unpublish and unstage. After every round: every file
// written with fsync so far reads back, and nothing is left (mounts, loop devices, session
// processes, volume records). The faults are the ones the field's data-loss bugs come from:
// the agent SIGKILLed, the session process SIGKILLed, its keeper SIGKILLed (alone, and followed
// by the session), a target outage shorter than the replacement timeout (I/O goes on), one
// longer (I/O fails, nothing hangs), and a target frozen (SIGSTOP: the connection stays open)
// longer than the timeout. The first eight rounds have each fault once.
//
// SH_SOAK_ROUNDS (default 8) and SH_SOAK_SEED (default 1) pick the rounds; a failure prints the
// seed and round so that it can be replayed.

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <absl/cleanup/cleanup.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/process.h"
#include "base/subprocess.h"
#include "proto/state.pb.h"
#include "tests/integration/node_test_base.h"

namespace stagehand::testing {
namespace {

using Code = grpc::StatusCode;

enum class Fault {
  kNone,
  kAgentKill,
  kSessionKill,
  kShortOutage,
  kLongOutage,
  kKeeperKill,
  kKeeperThenSessionKill,
  kLongFreeze,
};
constexpr int kFaults = 8;

const char* FaultName(Fault f) {
  switch (f) {
    case Fault::kNone:
      return "none";
    case Fault::kAgentKill:
      return "agent SIGKILL";
    case Fault::kSessionKill:
      return "session SIGKILL";
    case Fault::kShortOutage:
      return "target outage shorter than the replacement timeout";
    case Fault::kLongOutage:
      return "target outage longer than the replacement timeout";
    case Fault::kKeeperKill:
      return "keeper SIGKILL";
    case Fault::kKeeperThenSessionKill:
      return "keeper SIGKILL, then session SIGKILL";
    case Fault::kLongFreeze:
      return "target frozen (SIGSTOP) longer than the replacement timeout";
  }
  return "?";
}

int EnvInt(const char* name, int fallback) {
  const char* v = getenv(name);  // NOLINT(concurrency-mt-unsafe): test setup, one thread.
  return v != nullptr ? atoi(v) : fallback;
}

class SoakTest : public NodeIntegrationTest {
 protected:
  // Round timeouts are short so that a long outage is quick; the session reconnects meanwhile.
  csi::v1::NodeStageVolumeRequest Request() const {
    auto req = StageRequest("vol-soak");
    (*req.mutable_volume_context())["replacementTimeout"] = "2";
    return req;
  }

  void KillSessionProcess() {
    for (int pid : testbed::RunningSessionProcesses()) {
      kill(pid, SIGKILL);
      while (ProcessStartTime(pid) != 0) {
        std::this_thread::yield();
      }
    }
  }

  // Kills the session's keeper and waits until the session has a keeper again (one that
  // adopted it).
  void KillKeeper() {
    const auto before = SessionNow();
    ASSERT_TRUE(before.has_value() && before->keeper_pid() > 0);
    const auto keeper = static_cast<int>(before->keeper_pid());
    ASSERT_EQ(kill(keeper, SIGKILL), 0);
    ASSERT_TRUE(WaitForStatus([keeper](const state::v1::SessionStatus& s) {
      return s.keeper_pid() > 0 && static_cast<int>(s.keeper_pid()) != keeper;
    })) << "no keeper took the place of the dead one";
  }

  // The volume's records directory holds no record.
  bool NoRecords() const {
    auto out = RunProcess({"find", daemon_->state_dir() + "/volumes", "-name", "*.json"});
    return !out.ok() || out->output.empty();
  }
};

TEST_F(SoakTest, RandomFaultsNeverLoseSyncedDataNorLeaveAnythingBehind) {
  AddLun(64ull << 20);
  const int rounds = EnvInt("SH_SOAK_ROUNDS", 8);
  const int seed = EnvInt("SH_SOAK_SEED", 1);
  std::mt19937 random(static_cast<uint32_t>(seed));
  const std::string target = root_ + "/pod";
  std::vector<std::pair<std::string, std::string>> durable;  // File name, content.
  std::vector<int> order(kFaults);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), random);

  for (int round = 0; round < rounds; ++round) {
    // Every fault once in the first kFaults rounds (in an order of the seed's), then at random.
    const auto fault = static_cast<Fault>(round < kFaults ? order[round] : random() % kFaults);
    SCOPED_TRACE(::testing::Message()
                 << "seed " << seed << " round " << round << " fault " << FaultName(fault));
    // Stage and publish, each asked twice (the kubelet repeats calls).
    for (int i = 0; i < 2; ++i) {
      const grpc::Status s = Stage(Request());
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
    for (int i = 0; i < 2; ++i) {
      const grpc::Status s = Publish(PublishRequest("vol-soak", target));
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
    for (const auto& [name, content] : durable) {
      EXPECT_EQ(ReadFileToString(target + "/" + name).value_or("<missing>"), content) << name;
    }
    const std::string name = "round-" + std::to_string(round);
    const std::string content(4096 + (random() % 65536), static_cast<char>('a' + round % 26));
    ASSERT_TRUE(testbed::WriteDurably(target + "/" + name, content));
    durable.emplace_back(name, content);

    switch (fault) {
      case Fault::kNone:
        break;
      case Fault::kAgentKill:
        daemon_->Kill();
        ASSERT_TRUE(daemon_->Start().ok());
        // A restarted agent adopts the live session: a repeated stage and publish are no-ops.
        EXPECT_TRUE(Stage(Request()).ok());
        EXPECT_TRUE(Publish(PublishRequest("vol-soak", target)).ok());
        break;
      case Fault::kSessionKill:
        KillSessionProcess();
        // Its keeper starts a successor that takes over the FUSE connection: I/O goes on, and
        // a repeated stage is a no-op.
        EXPECT_TRUE(testbed::WriteDurably(target + "/" + name + "-after", content))
            << "I/O must go on after the session process died";
        durable.emplace_back(name + "-after", content);
        EXPECT_TRUE(Stage(Request()).ok());
        break;
      case Fault::kShortOutage: {
        ASSERT_TRUE(tgtd_->Restart().ok());
        EXPECT_TRUE(testbed::WriteDurably(target + "/" + name + "-after", content))
            << "I/O must go on after a short outage";
        durable.emplace_back(name + "-after", content);
        break;
      }
      case Fault::kLongOutage: {
        tgtd_->Kill();
        auto io = std::async(std::launch::async, [&] {
          return testbed::WriteDurably(target + "/lost-" + name, content);
        });
        const bool finished = io.wait_for(std::chrono::seconds(90)) == std::future_status::ready;
        ASSERT_TRUE(tgtd_->Restart().ok());
        ASSERT_TRUE(finished) << "I/O hung on a target that is gone";
        EXPECT_FALSE(io.get()) << "I/O to a target that is gone must fail";
        break;
      }
      case Fault::kKeeperKill:
      case Fault::kKeeperThenSessionKill:
        ASSERT_NO_FATAL_FAILURE(KillKeeper());
        if (fault == Fault::kKeeperThenSessionKill) {
          KillSessionProcess();  // Its adoptive keeper starts a successor.
        }
        EXPECT_TRUE(testbed::WriteDurably(target + "/" + name + "-after", content))
            << "I/O must go on after the keeper (and the session) died";
        durable.emplace_back(name + "-after", content);
        break;
      case Fault::kLongFreeze: {
        // The connection stays open and nothing answers: the write fails at the timeout, with
        // the target still frozen.
        absl::Cleanup thaw = [] { (void)kill(tgtd_->pid(), SIGCONT); };
        ASSERT_EQ(kill(tgtd_->pid(), SIGSTOP), 0);
        siginfo_t info{};
        ASSERT_EQ(waitid(P_PID, static_cast<id_t>(tgtd_->pid()), &info, WSTOPPED | WNOWAIT), 0);
        auto io = std::async(std::launch::async, [&] {
          return testbed::WriteDurably(target + "/lost-" + name, content);
        });
        const bool finished = io.wait_for(std::chrono::seconds(90)) == std::future_status::ready;
        std::move(thaw).Invoke();
        ASSERT_TRUE(finished) << "I/O hung on a frozen target";
        EXPECT_FALSE(io.get()) << "I/O to a frozen target must fail at the replacement timeout";
        break;
      }
    }

    // Tear down, each call asked twice.
    for (int i = 0; i < 2; ++i) {
      const grpc::Status s = Unpublish("vol-soak", target);
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
    for (int i = 0; i < 2; ++i) {
      const grpc::Status s = Unstage("vol-soak", Staging("vol-soak"));
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
    ASSERT_TRUE(testbed::Leftovers(root_).empty())
        << ::testing::PrintToString(testbed::Leftovers(root_));
    ASSERT_TRUE(testbed::RunningSessionProcesses().empty());
    ASSERT_TRUE(NoRecords());
  }
  // The data of the last round, once more on a fresh stage.
  ASSERT_TRUE(Stage(Request()).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-soak", target)).ok());
  for (const auto& [name, content] : durable) {
    EXPECT_EQ(ReadFileToString(target + "/" + name).value_or("<missing>"), content) << name;
  }
  EXPECT_TRUE(Unpublish("vol-soak", target).ok());
  EXPECT_TRUE(Unstage("vol-soak", Staging("vol-soak")).ok());
}

}  // namespace
}  // namespace stagehand::testing

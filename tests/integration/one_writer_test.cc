// One writer per LUN across nodes, with two real agents (node ids and initiator names of their
// own) on one tgtd LUN: a single-node volume is reserved for the node that stages it, another
// node's stage is refused (retryable, naming the holder's key) until the holder unstages, a
// holder whose reservation another node took over is fenced (its writes fail, none lands), and
// the holder keeps its reservation through a session killed, a target restarted and a target
// outage shorter than the takeover time; a multi-writer volume registers nothing.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "base/subprocess.h"
#include "iscsi/libiscsi_connection.h"
#include "iscsi/persistent_reservation.h"
#include "proto/agent.grpc.pb.h"
#include "tests/integration/iscsi_proxy.h"
#include "tests/integration/node_test_base.h"
#include "tests/testing/http_get.h"

namespace stagehand::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

namespace agentpb = ::stagehand::agent::v1;

constexpr char kOtherNode[] = "node-b";
constexpr char kOtherInitiator[] = "iqn.2026-12.dev.stagehand:node-b";

// 4 KiB of the file `path` at `offset`.
std::string ReadAt(const std::string& path, off_t offset) {
  std::string out(4096, '\0');
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || pread(fd, out.data(), out.size(), offset) != static_cast<ssize_t>(out.size())) {
    out.clear();
  }
  if (fd >= 0) {
    close(fd);
  }
  return out;
}

class OneWriterTest : public NodeIntegrationTest {
 protected:
  void SetUp() override {
    NodeIntegrationTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    other_root_ = testbed::MakeTempRoot();
    ASSERT_FALSE(other_root_.empty());
    other_ = std::make_unique<testbed::StagehandDaemon>(
        other_root_, std::vector<std::string>{absl::StrCat("--node-id=", kOtherNode),
                                              absl::StrCat("--initiator-name=", kOtherInitiator)});
    auto s = other_->Start();
    ASSERT_TRUE(s.ok()) << s;
    AddLun();
  }

  void TearDown() override {
    if (!other_root_.empty()) {
      other_->Kill();
      const auto left = testbed::Leftovers(other_root_);
      if (HasFailure()) {
        auto log = ReadFileToString(other_root_ + "/daemon.log");
        std::cerr << "---- node-b's daemon log ----\n" << log.value_or("(none)") << "----\n";
      }
      testbed::ForceCleanup(other_root_);
      EXPECT_TRUE(left.empty()) << "node-b left behind: " << ::testing::PrintToString(left);
    }
    NodeIntegrationTest::TearDown();
  }

  // The same stage request as node A's, staged under node B's root.
  csi::v1::NodeStageVolumeRequest OtherStageRequest(const std::string& volume_id,
                                                    bool block = false) const {
    auto req = StageRequest(volume_id, block);
    req.set_staging_target_path(OtherStaging(volume_id));
    return req;
  }

  std::string OtherStaging(const std::string& volume_id) const {
    return other_root_ + "/stg-" + volume_id;
  }

  grpc::Status OtherStage(const csi::v1::NodeStageVolumeRequest& req) {
    csi::v1::NodeStageVolumeResponse resp;
    return other_->node().NodeStageVolume(testbed::Ctx().get(), req, &resp);
  }

  grpc::Status OtherPublish(const std::string& volume_id, const std::string& target) {
    auto req = PublishRequest(volume_id, target);
    req.set_staging_target_path(OtherStaging(volume_id));
    csi::v1::NodePublishVolumeResponse resp;
    return other_->node().NodePublishVolume(testbed::Ctx().get(), req, &resp);
  }

  grpc::Status OtherUnstage(const std::string& volume_id) {
    csi::v1::NodeUnstageVolumeRequest unstage;
    unstage.set_volume_id(volume_id);
    unstage.set_staging_target_path(OtherStaging(volume_id));
    csi::v1::NodeUnstageVolumeResponse unstaged;
    return other_->node().NodeUnstageVolume(testbed::Ctx().get(), unstage, &unstaged);
  }

  // `stagehandctl iscsi reservation ... OPERATOR_ARGS` on the LUN: refused without `confirm`
  // (the message names it, and node A still holds the LUN), then run with it. OK when it ran.
  ::testing::AssertionResult RunConfirmed(const std::vector<std::string>& operator_args,
                                          const std::string& confirm) {
    std::vector<std::string> args = {STAGEHANDCTL_BINARY,
                                     "iscsi",
                                     "reservation",
                                     "--portal",
                                     tgtd_->portal(),
                                     "--iqn",
                                     Iqn(),
                                     "--lun",
                                     "1"};
    args.insert(args.end(), operator_args.begin(), operator_args.end());
    auto unconfirmed = RunProcess(args);
    if (!unconfirmed.ok() || unconfirmed->exit_code == 0 ||
        unconfirmed->output.find(confirm) == std::string::npos) {
      return ::testing::AssertionFailure() << "not refused without " << confirm;
    }
    if (!HeldBy(ReservationsNow(), key_a_)) {
      return ::testing::AssertionFailure() << "the LUN changed hands without " << confirm;
    }
    args.push_back(confirm);
    auto confirmed = RunProcess(args);
    if (!confirmed.ok() || confirmed->exit_code != 0) {
      return ::testing::AssertionFailure()
             << "with " << confirm << ": " << (confirmed.ok() ? confirmed->output : "not run");
    }
    return ::testing::AssertionSuccess() << confirmed->output;
  }

  // Node A, which published the block volume at `target`, is fenced: a write fails, its session
  // says FENCED, and nothing of it lands on the LUN.
  void ExpectAFenced(const std::string& target) {
    EXPECT_EQ(testbed::WriteBlockDirect(target, 1 << 20, 'a'), EIO);
    EXPECT_TRUE(WaitForStatus([](const state::v1::SessionStatus& s) {
      return s.state() == state::v1::SessionStatus::FENCED;
    }));
    EXPECT_EQ(ReadAt(lun_file_, 1 << 20), std::string(4096, '\0')) << "a fenced write landed";
  }

  grpc::Status OtherUnpublishAndUnstage(const std::string& volume_id, const std::string& target) {
    csi::v1::NodeUnpublishVolumeRequest unpublish;
    unpublish.set_volume_id(volume_id);
    unpublish.set_target_path(target);
    csi::v1::NodeUnpublishVolumeResponse unpublished;
    grpc::Status s =
        other_->node().NodeUnpublishVolume(testbed::Ctx().get(), unpublish, &unpublished);
    if (!s.ok()) {
      return s;
    }
    return OtherUnstage(volume_id);
  }

  // The value of the counter `name` for `volume_id` on node B's /metrics; -1 without one.
  double OtherCounter(const std::string& name, const std::string& volume_id) const {
    auto agent = agentpb::Agent::NewStub(grpc::CreateChannel(
        "unix:" + other_->runtime_dir() + "/agent.sock", grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    agentpb::AgentStatus status;
    EXPECT_TRUE(agent->GetStatus(&context, {}, &status).ok());
    const auto metrics = HttpGet(status.metrics_port(), "/metrics");
    EXPECT_TRUE(metrics && metrics->code == 200);
    const std::string prefix = absl::StrCat(name, "{volume_id=\"", volume_id, "\"} ");
    for (const absl::string_view line : absl::StrSplit(metrics ? metrics->body : "", '\n')) {
      double value = 0;
      if (absl::StartsWith(line, prefix) && absl::SimpleAtod(line.substr(prefix.size()), &value)) {
        return value;
      }
    }
    return -1;
  }

  // Whether a key of the node of `node_key` holds the reservation (keys move with renewals).
  static bool HeldBy(const iscsi::Reservations& r, uint64_t node_key) {
    return r.holder && iscsi::SameNode(*r.holder, node_key);
  }

  // Registrations of the node of `node_key`.
  static size_t KeysOf(const iscsi::Reservations& r, uint64_t node_key) {
    return static_cast<size_t>(std::count_if(
        r.keys.begin(), r.keys.end(), [&](uint64_t k) { return iscsi::SameNode(k, node_key); }));
  }

  // The filesystem on the LUN's backing file is consistent (e2fsck -fn exits 0).
  void ExpectCleanFilesystem() const {
    auto fsck = RunProcess({"e2fsck", "-fn", lun_file_});
    ASSERT_TRUE(fsck.ok()) << fsck.status();
    EXPECT_EQ(fsck->exit_code, 0) << fsck->output;
  }

  const uint64_t key_a_ = iscsi::NodeKey("it-node", 0);  // The fixture's daemon.
  const uint64_t key_b_ = iscsi::NodeKey(kOtherNode, 0);
  std::string other_root_;
  std::unique_ptr<testbed::StagehandDaemon> other_;
};

TEST_F(OneWriterTest, AnotherNodeWaitsWhileTheHolderHasTheVolumeAndStagesOnceItUnstages) {
  const std::string target_a = root_ + "/pod-a";
  const std::string target_b = other_root_ + "/pod-b";
  ASSERT_TRUE(Stage(StageRequest("vol-w")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-w", target_a)).ok());
  ASSERT_TRUE(WriteFileAtomically(target_a + "/from-a", "a\n", 0644).ok());
  EXPECT_TRUE(HeldBy(ReservationsNow(), key_a_));

  const grpc::Status refused = OtherStage(OtherStageRequest("vol-w"));

  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("in use on another node"));
  EXPECT_THAT(refused.error_message(), HasSubstr(iscsi::FormatKey(key_a_).substr(0, 10)))
      << "names the holder's key";
  EXPECT_THAT(testbed::Leftovers(other_root_), IsEmpty()) << "a refused stage leaves nothing";
  const iscsi::Reservations held = ReservationsNow();
  EXPECT_TRUE(HeldBy(held, key_a_));
  EXPECT_EQ(held.keys.size(), 1u) << "node B left no registration";
  auto still = ReadFileToString(target_a + "/from-a");
  EXPECT_TRUE(still.ok() && *still == "a\n");

  ASSERT_TRUE(Unpublish("vol-w", target_a).ok());
  ASSERT_TRUE(Unstage("vol-w", Staging("vol-w")).ok());
  EXPECT_TRUE(ReservationsNow().keys.empty()) << "the unstage released the LUN";

  const grpc::Status staged = OtherStage(OtherStageRequest("vol-w"));

  ASSERT_TRUE(staged.ok()) << staged.error_message();
  EXPECT_TRUE(HeldBy(ReservationsNow(), key_b_));
  EXPECT_EQ(OtherCounter("stagehand_reservation_refusals_total", "vol-w"), 1);
  EXPECT_EQ(OtherCounter("stagehand_reservation_takeovers_total", "vol-w"), 0)
      << "a hand-off is no takeover";
  ASSERT_TRUE(OtherPublish("vol-w", target_b).ok());
  auto seen = ReadFileToString(target_b + "/from-a");
  EXPECT_TRUE(seen.ok() && *seen == "a\n") << "node B sees what node A wrote";
  ASSERT_TRUE(WriteFileAtomically(target_b + "/from-b", "b\n", 0644).ok());
  ASSERT_TRUE(OtherUnpublishAndUnstage("vol-w", target_b).ok());
  EXPECT_TRUE(ReservationsNow().keys.empty());
  ExpectCleanFilesystem();
}

TEST_F(OneWriterTest, AHolderWhoseReservationWasTakenOverIsFencedAndNoWriteOfItLands) {
  const std::string target = root_ + "/dev-a";
  ASSERT_TRUE(Stage(StageRequest("vol-f", /*block=*/true)).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-f", target, /*block=*/true)).ok());
  ASSERT_EQ(testbed::WriteBlockDirect(target, 1 << 20, 'a'), 0);

  // Node B takes the LUN over, as after node A was found dead.
  auto b = LoginAs(kOtherInitiator);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->ReserveOut(iscsi::ReserveAction::kRegister, 0, key_b_, 0).ok());
  const iscsi::Reservations before = ReservationsNow();
  ASSERT_TRUE(HeldBy(before, key_a_));
  ASSERT_TRUE(b->ReserveOut(iscsi::ReserveAction::kPreempt, key_b_, *before.holder,
                            iscsi::kWriteExclusiveRegistrantsOnly)
                  .ok());

  EXPECT_EQ(testbed::WriteBlockDirect(target, 2 << 20, 'x'), EIO);
  ASSERT_TRUE(WaitForStatus([](const state::v1::SessionStatus& s) {
    return s.state() == state::v1::SessionStatus::FENCED;
  }));
  EXPECT_EQ(testbed::WriteBlockDirect(target, 3 << 20, 'y'), EIO) << "failed closed: never retried";
  csi::v1::NodeGetVolumeHealthResponse health;
  ASSERT_TRUE(Health("vol-f", &health).ok());
  bool fenced = false;
  for (const auto& e : health.volume_health().health_statuses()) {
    fenced = fenced || (e.reason() == "Fenced" && e.status() == csi::v1::INACCESSIBLE);
  }
  EXPECT_TRUE(fenced) << health.DebugString();

  EXPECT_TRUE(Unpublish("vol-f", target).ok());
  EXPECT_TRUE(Unstage("vol-f", Staging("vol-f")).ok());
  const iscsi::Reservations after = ReservationsNow();
  EXPECT_EQ(after.holder, key_b_) << "the fenced node left the new holder's reservation alone";
  EXPECT_EQ(after.keys, std::vector<uint64_t>{key_b_});
  EXPECT_EQ(ReadAt(lun_file_, 1 << 20), std::string(4096, 'a'));
  EXPECT_EQ(ReadAt(lun_file_, 2 << 20), std::string(4096, '\0')) << "a fenced write landed";
  EXPECT_EQ(ReadAt(lun_file_, 3 << 20), std::string(4096, '\0')) << "a fenced write landed";
  EXPECT_TRUE(b->ReserveOut(iscsi::ReserveAction::kRelease, key_b_, 0,
                            iscsi::kWriteExclusiveRegistrantsOnly)
                  .ok());
  EXPECT_TRUE(b->ReserveOut(iscsi::ReserveAction::kRegister, key_b_, 0, 0).ok());
}

TEST_F(OneWriterTest, TheHolderKeepsItsReservationThroughASessionKillAndATargetRestart) {
  const std::string target = root_ + "/pod-a";
  ASSERT_TRUE(Stage(StageRequest("vol-k")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-k", target)).ok());
  const auto first = SessionNow();
  ASSERT_TRUE(first.has_value());

  // A successor of a killed session logs in on a new nexus and takes the reservation back from
  // the one that died.
  ASSERT_EQ(kill(first->pid(), SIGKILL), 0);
  ASSERT_TRUE(WaitForStatus([&](const state::v1::SessionStatus& s) {
    return s.pid() != first->pid() && s.state() == state::v1::SessionStatus::UP;
  }));
  iscsi::Reservations now = ReservationsNow();
  EXPECT_TRUE(HeldBy(now, key_a_));
  EXPECT_EQ(now.keys.size(), 1u) << "the dead nexus's registration is gone";
  ASSERT_TRUE(WriteFileAtomically(target + "/after-kill", "k\n", 0644).ok());

  // tgt keeps no reservation across a restart: the holder takes it again on its reconnect.
  const uint64_t reconnects = SessionNow()->reconnects();
  ASSERT_TRUE(tgtd_->Restart().ok());
  ASSERT_TRUE(WaitForStatus([&](const state::v1::SessionStatus& s) {
    return s.reconnects() > reconnects && s.state() == state::v1::SessionStatus::UP;
  }));
  now = ReservationsNow();
  EXPECT_TRUE(HeldBy(now, key_a_));
  EXPECT_EQ(now.keys.size(), 1u);
  ASSERT_TRUE(WriteFileAtomically(target + "/after-restart", "r\n", 0644).ok());
  EXPECT_EQ(OtherStage(OtherStageRequest("vol-k")).error_code(), grpc::StatusCode::UNAVAILABLE);

  ASSERT_TRUE(Unpublish("vol-k", target).ok());
  ASSERT_TRUE(Unstage("vol-k", Staging("vol-k")).ok());
  EXPECT_TRUE(ReservationsNow().keys.empty());
  ExpectCleanFilesystem();
}

// An operator releases the LUN of a node it takes for dead (stagehandctl, with a confirmation):
// the waiting node stages at once, and the node, alive after all, is fenced.
TEST_F(OneWriterTest, AnOperatorReleasesAHolderTakenForDeadWhichIsFencedIfItWasNot) {
  const std::string target = root_ + "/dev-a";
  ASSERT_TRUE(Stage(StageRequest("vol-r", /*block=*/true)).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-r", target, /*block=*/true)).ok());
  ASSERT_EQ(OtherStage(OtherStageRequest("vol-r", /*block=*/true)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  const auto released = RunConfirmed({"--release-node", "it-node"}, "--node-is-dead");
  ASSERT_TRUE(released);
  EXPECT_THAT(released.message(), HasSubstr("reservation:   none"));

  ASSERT_TRUE(OtherStage(OtherStageRequest("vol-r", /*block=*/true)).ok());
  EXPECT_TRUE(HeldBy(ReservationsNow(), key_b_));
  ExpectAFenced(target);
  EXPECT_TRUE(Unpublish("vol-r", target).ok());
  EXPECT_TRUE(Unstage("vol-r", Staging("vol-r")).ok());
  EXPECT_TRUE(HeldBy(ReservationsNow(), key_b_));
  EXPECT_TRUE(OtherUnstage("vol-r").ok());
  EXPECT_TRUE(ReservationsNow().keys.empty());
}

// An operator hands the LUN of a holder it takes for dead to another node (stagehandctl
// --take-over-for, with a confirmation): no one else can stage it meanwhile, the other node's
// stage then has it, and the holder, alive after all, is fenced.
TEST_F(OneWriterTest, AnOperatorHandsTheLunToAnotherNodeAndTheHolderIsFenced) {
  const std::string target = root_ + "/dev-a";
  ASSERT_TRUE(Stage(StageRequest("vol-h", /*block=*/true)).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-h", target, /*block=*/true)).ok());
  ASSERT_TRUE(RunConfirmed({"--take-over-for", kOtherNode}, "--holder-is-dead"));
  EXPECT_TRUE(HeldBy(ReservationsNow(), key_b_));

  ExpectAFenced(target);
  ASSERT_TRUE(OtherStage(OtherStageRequest("vol-h", /*block=*/true)).ok());
  const iscsi::Reservations now = ReservationsNow();
  EXPECT_TRUE(HeldBy(now, key_b_));
  EXPECT_EQ(now.keys.size(), 1u) << "the other node took the operator's registration over";
  EXPECT_TRUE(Unpublish("vol-h", target).ok());
  EXPECT_TRUE(Unstage("vol-h", Staging("vol-h")).ok());
  EXPECT_TRUE(HeldBy(ReservationsNow(), key_b_));
  EXPECT_TRUE(OtherUnstage("vol-h").ok());
  EXPECT_TRUE(ReservationsNow().keys.empty());
}

// The holder renews its key every second (takeoverAfter 3): another node's stages are refused
// across several renewals; once every process of the holder's node is stopped (SIGSTOP), its
// key stands still and a stage takes the LUN over after the takeover time; the holder, thawed,
// is fenced, and none of its writes lands.
TEST_F(OneWriterTest, AFrozenHolderIsTakenOverAndFencedAndALiveOneIsNot) {
  const std::string target = root_ + "/dev-a";
  auto stage_a = StageRequest("vol-t", /*block=*/true);
  (*stage_a.mutable_volume_context())["takeoverAfter"] = "3";
  auto stage_b = OtherStageRequest("vol-t", /*block=*/true);
  (*stage_b.mutable_volume_context())["takeoverAfter"] = "3";
  ASSERT_TRUE(Stage(stage_a).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-t", target, /*block=*/true)).ok());
  ASSERT_EQ(testbed::WriteBlockDirect(target, 1 << 20, 'a'), 0);

  // Alive: B keeps retrying while A's key moves four times (more than the takeover time).
  std::vector<uint64_t> seen;
  for (int attempt = 0; attempt < 5000 && seen.size() < 5; ++attempt) {
    const grpc::Status refused = OtherStage(stage_b);
    ASSERT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
    const iscsi::Reservations now = ReservationsNow();
    ASSERT_TRUE(HeldBy(now, key_a_));
    if (seen.empty() || seen.back() != *now.holder) {
      seen.push_back(*now.holder);
    }
  }
  ASSERT_GE(seen.size(), 5u) << "the holder renews its key";

  // Frozen: every process of node A.
  const auto session = SessionNow();
  ASSERT_TRUE(session.has_value());
  const std::vector<int> node_a = {daemon_->pid(), session->pid(), session->keeper_pid()};
  for (int pid : node_a) {
    ASSERT_EQ(kill(pid, SIGSTOP), 0) << pid;
  }
  grpc::Status taken = OtherStage(stage_b);
  for (int attempt = 0; attempt < 5000 && !taken.ok(); ++attempt) {
    ASSERT_EQ(taken.error_code(), grpc::StatusCode::UNAVAILABLE) << taken.error_message();
    taken = OtherStage(stage_b);
  }
  for (int pid : node_a) {
    (void)kill(pid, SIGCONT);
  }

  ASSERT_TRUE(taken.ok()) << taken.error_message();
  const iscsi::Reservations after = ReservationsNow();
  EXPECT_TRUE(HeldBy(after, key_b_));
  EXPECT_EQ(KeysOf(after, key_a_), 0u) << "nothing of node A stays registered";
  EXPECT_EQ(OtherCounter("stagehand_reservation_takeovers_total", "vol-t"), 1);
  EXPECT_GE(OtherCounter("stagehand_reservation_refusals_total", "vol-t"), 5);
  EXPECT_EQ(testbed::WriteBlockDirect(target, 2 << 20, 'x'), EIO);
  EXPECT_TRUE(WaitForStatus([](const state::v1::SessionStatus& s) {
    return s.state() == state::v1::SessionStatus::FENCED;
  }));
  EXPECT_EQ(ReadAt(lun_file_, 1 << 20), std::string(4096, 'a'));
  EXPECT_EQ(ReadAt(lun_file_, 2 << 20), std::string(4096, '\0')) << "a fenced write landed";
  EXPECT_TRUE(Unpublish("vol-t", target).ok());
  EXPECT_TRUE(Unstage("vol-t", Staging("vol-t")).ok());
  EXPECT_TRUE(HeldBy(ReservationsNow(), key_b_)) << "the fenced node left the new holder alone";
  csi::v1::NodeUnstageVolumeRequest unstage;
  unstage.set_volume_id("vol-t");
  unstage.set_staging_target_path(OtherStaging("vol-t"));
  csi::v1::NodeUnstageVolumeResponse unstaged;
  EXPECT_TRUE(other_->node().NodeUnstageVolume(testbed::Ctx().get(), unstage, &unstaged).ok());
  EXPECT_TRUE(ReservationsNow().keys.empty());
}

// A 15 s outage of the target (tgtd stopped with SIGSTOP: every connection hangs) is shorter
// than the takeover time (30 s, the default): another node's stages fail all through it and are
// refused after it, the holder takes its reservation up again on its own and keeps writing.
TEST_F(OneWriterTest, AnOutageShorterThanTheTakeoverTimeKeepsTheHolder) {
  const std::string target = root_ + "/pod-a";
  ASSERT_TRUE(Stage(StageRequest("vol-o")).ok());
  ASSERT_TRUE(Publish(PublishRequest("vol-o", target)).ok());
  ASSERT_TRUE(WriteFileAtomically(target + "/before", "1\n", 0644).ok());
  sync();
  const auto before = SessionNow();
  ASSERT_TRUE(before.has_value());
  ASSERT_NE(before->reservation_key(), 0u);
  ASSERT_EQ(OtherStage(OtherStageRequest("vol-o")).error_code(), grpc::StatusCode::UNAVAILABLE);

  ASSERT_NO_FATAL_FAILURE(FreezeTarget());
  const auto outage_start = std::chrono::steady_clock::now();
  int attempts = 0;
  // The outage is the scenario, not a wait for something: node B keeps trying all through it.
  while (std::chrono::steady_clock::now() - outage_start < std::chrono::seconds(15)) {
    const grpc::Status s = OtherStage(OtherStageRequest("vol-o"));
    ++attempts;
    if (s.ok()) {
      ThawTarget();
      FAIL() << "node B staged during the outage";
    }
  }
  ThawTarget();
  EXPECT_GT(attempts, 0);

  // The holder reconnects and claims again under a fresh key; its old one is gone.
  ASSERT_TRUE(WaitForStatus([&](const state::v1::SessionStatus& s) {
    return s.state() == state::v1::SessionStatus::UP &&
           s.reservation_key() != before->reservation_key();
  }));
  const grpc::Status refused = OtherStage(OtherStageRequest("vol-o"));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("in use on another node"));
  const iscsi::Reservations now = ReservationsNow();
  EXPECT_TRUE(HeldBy(now, key_a_));
  EXPECT_EQ(KeysOf(now, key_b_), 0u);
  EXPECT_THAT(testbed::Leftovers(other_root_), IsEmpty());
  ASSERT_TRUE(WriteFileAtomically(target + "/after", "2\n", 0644).ok());
  auto first = ReadFileToString(target + "/before");
  EXPECT_TRUE(first.ok() && *first == "1\n");

  ASSERT_TRUE(Unpublish("vol-o", target).ok());
  ASSERT_TRUE(Unstage("vol-o", Staging("vol-o")).ok());
  EXPECT_TRUE(ReservationsNow().keys.empty());
  ExpectCleanFilesystem();
}

// MULTI_NODE_MULTI_WRITER (block only): both nodes stage and write at once, nothing registers.
TEST_F(OneWriterTest, AMultiWriterBlockVolumeIsSharedWithoutReservations) {
  const auto mode = csi::v1::VolumeCapability::AccessMode::MULTI_NODE_MULTI_WRITER;
  auto stage_a = StageRequest("vol-m", /*block=*/true);
  stage_a.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);
  auto stage_b = OtherStageRequest("vol-m", /*block=*/true);
  stage_b.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);
  const std::string target_a = root_ + "/dev-a";
  const std::string target_b = other_root_ + "/dev-b";
  auto publish_a = PublishRequest("vol-m", target_a, /*block=*/true);
  publish_a.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);
  auto publish_b = PublishRequest("vol-m", target_b, /*block=*/true);
  publish_b.set_staging_target_path(OtherStaging("vol-m"));
  publish_b.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);

  ASSERT_TRUE(Stage(stage_a).ok());
  ASSERT_TRUE(Publish(publish_a).ok());
  const grpc::Status staged_b = OtherStage(stage_b);
  ASSERT_TRUE(staged_b.ok()) << staged_b.error_message();
  csi::v1::NodePublishVolumeResponse published;
  ASSERT_TRUE(other_->node().NodePublishVolume(testbed::Ctx().get(), publish_b, &published).ok());

  EXPECT_EQ(testbed::WriteBlockDirect(target_a, 1 << 20, 'a'), 0);
  EXPECT_EQ(testbed::WriteBlockDirect(target_b, 2 << 20, 'b'), 0);
  const iscsi::Reservations shared = ReservationsNow();
  EXPECT_FALSE(shared.holder.has_value());
  EXPECT_THAT(shared.keys, IsEmpty()) << "a multi-writer volume registers nothing";
  EXPECT_EQ(ReadAt(lun_file_, 1 << 20), std::string(4096, 'a'));
  EXPECT_EQ(ReadAt(lun_file_, 2 << 20), std::string(4096, 'b'));

  EXPECT_TRUE(Unpublish("vol-m", target_a).ok());
  EXPECT_TRUE(Unstage("vol-m", Staging("vol-m")).ok());
  EXPECT_TRUE(OtherUnpublishAndUnstage("vol-m", target_b).ok());
  EXPECT_THAT(ReservationsNow().keys, IsEmpty());
}

// MULTI_NODE_SINGLE_WRITER (block only): both nodes stage as readers and register nothing; the
// first read-write publish makes its node the writer, the other node's read-write publish is
// refused while that one holds the LUN (it reads, and its writes alone fail), and the last
// read-write unpublish lets the other node become the writer, after which the first can no
// longer write.
TEST_F(OneWriterTest, AMultiNodeSingleWriterVolumeHasItsWriterChosenAtPublish) {
  const auto mode = csi::v1::VolumeCapability::AccessMode::MULTI_NODE_SINGLE_WRITER;
  auto stage_a = StageRequest("vol-w", /*block=*/true);
  stage_a.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);
  auto stage_b = OtherStageRequest("vol-w", /*block=*/true);
  stage_b.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);
  const auto publish_a = [&](const std::string& target, bool readonly) {
    auto req = PublishRequest("vol-w", target, /*block=*/true);
    req.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);
    req.set_readonly(readonly);
    return Publish(req);
  };
  const auto publish_b = [&](const std::string& target, bool readonly) {
    auto req = PublishRequest("vol-w", target, /*block=*/true);
    req.set_staging_target_path(OtherStaging("vol-w"));
    req.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);
    req.set_readonly(readonly);
    csi::v1::NodePublishVolumeResponse resp;
    return other_->node().NodePublishVolume(testbed::Ctx().get(), req, &resp);
  };
  const std::string a_rw = root_ + "/a-rw";
  const std::string a_ro = root_ + "/a-ro";
  const std::string b_rw = other_root_ + "/b-rw";
  const std::string b_ro = other_root_ + "/b-ro";

  ASSERT_TRUE(Stage(stage_a).ok());
  const grpc::Status staged_b = OtherStage(stage_b);
  ASSERT_TRUE(staged_b.ok()) << staged_b.error_message();
  EXPECT_THAT(ReservationsNow().keys, IsEmpty()) << "a stage reads only: it registers nothing";

  const grpc::Status writer_a = publish_a(a_rw, /*readonly=*/false);
  ASSERT_TRUE(writer_a.ok()) << writer_a.error_message();
  EXPECT_TRUE(HeldBy(ReservationsNow(), key_a_));
  EXPECT_EQ(KeysOf(ReservationsNow(), key_b_), 0u);
  EXPECT_EQ(testbed::WriteBlockDirect(a_rw, 1 << 20, 'a'), 0);
  EXPECT_EQ(ReadAt(lun_file_, 1 << 20), std::string(4096, 'a'));

  const grpc::Status refused = publish_b(b_rw, /*readonly=*/false);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("written on another node"));
  const grpc::Status reader_b = publish_b(b_ro, /*readonly=*/true);
  ASSERT_TRUE(reader_b.ok()) << reader_b.error_message();
  EXPECT_EQ(ReadAt(b_ro, 1 << 20), std::string(4096, 'a'));
  EXPECT_EQ(testbed::WriteBlockDirect(b_ro, 2 << 20, 'b'), EIO) << "only the writer writes";
  EXPECT_EQ(ReadAt(lun_file_, 2 << 20), std::string(4096, '\0'));
  // The refused write failed alone: node B still reads what A writes after it.
  EXPECT_EQ(testbed::WriteBlockDirect(a_rw, 3 << 20, 'A'), 0);
  EXPECT_EQ(ReadAt(b_ro, 3 << 20), std::string(4096, 'A'));

  // Written through the page cache, by a process that keeps the device open (a close would
  // write it back, and so would udev's re-read after a close): the unpublish writes it back
  // before it gives the LUN up. (Through a node of its own: an open file under the publish
  // would keep its bind mount busy.)
  struct stat device {};

  ASSERT_EQ(stat(a_rw.c_str(), &device), 0);
  const std::string own_node = root_ + "/a-dev";
  ASSERT_EQ(mknod(own_node.c_str(), S_IFBLK | 0600, device.st_rdev), 0) << strerror(errno);
  const int cached = open(own_node.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(cached, 0) << strerror(errno);
  EXPECT_EQ(pwrite(cached, std::string(4096, 'c').data(), 4096, 6 << 20), 4096);
  ASSERT_TRUE(Unpublish("vol-w", a_rw).ok());
  EXPECT_EQ(ReadAt(lun_file_, 6 << 20), std::string(4096, 'c')) << "a cached write was lost";
  close(cached);
  unlink(own_node.c_str());
  EXPECT_EQ(KeysOf(ReservationsNow(), key_a_), 0u) << "the last read-write unpublish gives up";
  const grpc::Status writer_b = publish_b(b_rw, /*readonly=*/false);
  ASSERT_TRUE(writer_b.ok()) << writer_b.error_message();
  EXPECT_TRUE(HeldBy(ReservationsNow(), key_b_));
  EXPECT_EQ(testbed::WriteBlockDirect(b_rw, 4 << 20, 'b'), 0);
  EXPECT_EQ(ReadAt(lun_file_, 4 << 20), std::string(4096, 'b'));
  ASSERT_TRUE(publish_a(a_ro, /*readonly=*/true).ok());
  EXPECT_EQ(testbed::WriteBlockDirect(a_ro, 5 << 20, 'a'), EIO) << "node A no longer writes";
  EXPECT_EQ(ReadAt(lun_file_, 5 << 20), std::string(4096, '\0'));
  EXPECT_EQ(ReadAt(a_ro, 4 << 20), std::string(4096, 'b'));

  EXPECT_TRUE(Unpublish("vol-w", a_ro).ok());
  EXPECT_TRUE(Unstage("vol-w", Staging("vol-w")).ok());
  const auto unpublish_b = [&](const std::string& target) {
    csi::v1::NodeUnpublishVolumeRequest unpublish;
    unpublish.set_volume_id("vol-w");
    unpublish.set_target_path(target);
    csi::v1::NodeUnpublishVolumeResponse unpublished;
    return other_->node().NodeUnpublishVolume(testbed::Ctx().get(), unpublish, &unpublished);
  };
  EXPECT_TRUE(unpublish_b(b_ro).ok());
  EXPECT_TRUE(HeldBy(ReservationsNow(), key_b_)) << "a read-only unpublish keeps the writer";
  EXPECT_TRUE(OtherUnpublishAndUnstage("vol-w", b_rw).ok());
  EXPECT_THAT(ReservationsNow().keys, IsEmpty());
}

// The writer of a multi-node single-writer volume keeps its claim through its session process
// killed (the successor inherits it), and a frozen writer is taken over by another node's
// read-write publish once its key stood still for the takeover time: thawed, it is fenced.
TEST_F(OneWriterTest, AMultiNodeSingleWriterKeepsItsWriterThroughAKillAndLosesItFrozen) {
  const auto mode = csi::v1::VolumeCapability::AccessMode::MULTI_NODE_SINGLE_WRITER;
  auto stage_a = StageRequest("vol-f", /*block=*/true);
  stage_a.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);
  (*stage_a.mutable_volume_context())["takeoverAfter"] = "3";
  auto stage_b = OtherStageRequest("vol-f", /*block=*/true);
  stage_b.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);
  (*stage_b.mutable_volume_context())["takeoverAfter"] = "3";
  const std::string a_rw = root_ + "/a-rw";
  const std::string b_rw = other_root_ + "/b-rw";
  auto publish_a = PublishRequest("vol-f", a_rw, /*block=*/true);
  publish_a.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);
  auto publish_b = PublishRequest("vol-f", b_rw, /*block=*/true);
  publish_b.set_staging_target_path(OtherStaging("vol-f"));
  publish_b.mutable_volume_capability()->mutable_access_mode()->set_mode(mode);
  const auto publish_on_b = [&] {
    csi::v1::NodePublishVolumeResponse resp;
    return other_->node().NodePublishVolume(testbed::Ctx().get(), publish_b, &resp);
  };
  ASSERT_TRUE(Stage(stage_a).ok());
  ASSERT_TRUE(OtherStage(stage_b).ok());
  ASSERT_TRUE(Publish(publish_a).ok());
  ASSERT_EQ(testbed::WriteBlockDirect(a_rw, 1 << 20, 'a'), 0);

  const auto writer = SessionNow();
  ASSERT_TRUE(writer.has_value());
  ASSERT_NE(writer->reservation_key(), 0u);
  ASSERT_EQ(kill(writer->pid(), SIGKILL), 0);
  ASSERT_TRUE(WaitForStatus([&](const state::v1::SessionStatus& s) {
    return s.pid() != writer->pid() && s.state() == state::v1::SessionStatus::UP;
  }));
  const iscsi::Reservations after_kill = ReservationsNow();
  EXPECT_TRUE(HeldBy(after_kill, key_a_)) << "the successor inherits the claim";
  EXPECT_EQ(KeysOf(after_kill, key_a_), 1u) << "taken back from the nexus that died";
  EXPECT_NE(*after_kill.holder, writer->reservation_key());
  EXPECT_NE(SessionNow()->reservation_key(), 0u);
  EXPECT_EQ(testbed::WriteBlockDirect(a_rw, 2 << 20, 'a'), 0);
  EXPECT_EQ(publish_on_b().error_code(), grpc::StatusCode::UNAVAILABLE);

  const auto session = SessionNow();
  ASSERT_TRUE(session.has_value());
  const std::vector<int> node_a = {daemon_->pid(), session->pid(), session->keeper_pid()};
  for (int pid : node_a) {
    ASSERT_EQ(kill(pid, SIGSTOP), 0) << pid;
  }
  grpc::Status taken = publish_on_b();
  for (int attempt = 0; attempt < 5000 && !taken.ok(); ++attempt) {
    ASSERT_EQ(taken.error_code(), grpc::StatusCode::UNAVAILABLE) << taken.error_message();
    taken = publish_on_b();
  }
  for (int pid : node_a) {
    (void)kill(pid, SIGCONT);
  }

  ASSERT_TRUE(taken.ok()) << taken.error_message();
  EXPECT_TRUE(HeldBy(ReservationsNow(), key_b_));
  EXPECT_EQ(KeysOf(ReservationsNow(), key_a_), 0u);
  EXPECT_EQ(OtherCounter("stagehand_reservation_takeovers_total", "vol-f"), 1);
  EXPECT_EQ(testbed::WriteBlockDirect(b_rw, 3 << 20, 'b'), 0);
  EXPECT_EQ(testbed::WriteBlockDirect(a_rw, 4 << 20, 'x'), EIO);
  EXPECT_TRUE(WaitForStatus([](const state::v1::SessionStatus& s) {
    return s.state() == state::v1::SessionStatus::FENCED;
  }));
  EXPECT_EQ(ReadAt(lun_file_, 2 << 20), std::string(4096, 'a'));
  EXPECT_EQ(ReadAt(lun_file_, 3 << 20), std::string(4096, 'b'));
  EXPECT_EQ(ReadAt(lun_file_, 4 << 20), std::string(4096, '\0')) << "a fenced write landed";

  EXPECT_TRUE(Unpublish("vol-f", a_rw).ok());
  EXPECT_TRUE(Unstage("vol-f", Staging("vol-f")).ok());
  EXPECT_TRUE(HeldBy(ReservationsNow(), key_b_)) << "the fenced node left the new writer alone";
  EXPECT_TRUE(OtherUnpublishAndUnstage("vol-f", b_rw).ok());
  EXPECT_TRUE(ReservationsNow().keys.empty());
}

// A target without persistent reservations (a proxy turns PERSISTENT RESERVE IN/OUT into an
// opcode tgtd does not know): a single-node stage is refused, names the way out and leaves
// nothing; with takeoverAfter "off" it stages unprotected, and its health says so, also after its
// session process was killed and replaced.
TEST_F(OneWriterTest, ATargetWithoutReservationsServesASingleNodeVolumeOnlyWhenAllowed) {
  IscsiProxy proxy;
  ASSERT_TRUE(proxy.Start(tgtd_->port()).ok());
  proxy.HidePersistentReservations(true);
  auto req = StageRequest("vol-u");
  (*req.mutable_volume_context())["targetPortal"] = proxy.portal();

  const grpc::Status refused = Stage(req);

  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("does not support SCSI-3 persistent"));
  EXPECT_THAT(refused.error_message(), HasSubstr("takeoverAfter: \"off\""));
  EXPECT_THAT(testbed::Leftovers(root_), IsEmpty()) << "a refused stage leaves nothing";

  (*req.mutable_volume_context())["takeoverAfter"] = "off";
  const std::string target = root_ + "/pod-a";
  const grpc::Status staged = Stage(req);
  ASSERT_TRUE(staged.ok()) << staged.error_message();
  ASSERT_TRUE(Publish(PublishRequest("vol-u", target)).ok());
  ASSERT_TRUE(WriteFileAtomically(target + "/f", "u\n", 0644).ok());
  EXPECT_THAT(ReservationsNow().keys, IsEmpty());
  const auto unreserved = [&] {
    csi::v1::NodeGetVolumeHealthResponse health;
    EXPECT_TRUE(Health("vol-u", &health).ok());
    bool found = false;
    for (const auto& e : health.volume_health().health_statuses()) {
      found = found || (e.reason() == "Unreserved" && e.status() == csi::v1::DEGRADED);
    }
    return found;
  };
  EXPECT_TRUE(unreserved());
  const auto first = SessionNow();
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(first->unreserved());

  ASSERT_EQ(kill(first->pid(), SIGKILL), 0);
  ASSERT_TRUE(WaitForStatus([&](const state::v1::SessionStatus& s) {
    return s.pid() != first->pid() && s.state() == state::v1::SessionStatus::UP;
  }));
  EXPECT_TRUE(SessionNow()->unreserved()) << "the successor knows";
  EXPECT_TRUE(unreserved());
  ASSERT_TRUE(WriteFileAtomically(target + "/g", "v\n", 0644).ok());

  ASSERT_TRUE(Unpublish("vol-u", target).ok());
  ASSERT_TRUE(Unstage("vol-u", Staging("vol-u")).ok());
  EXPECT_THAT(ReservationsNow().keys, IsEmpty());
  ExpectCleanFilesystem();
}

}  // namespace
}  // namespace stagehand::testing

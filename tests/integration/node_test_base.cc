#include "tests/integration/node_test_base.h"

#include <signal.h>
#include <sys/inotify.h>
#include <sys/wait.h>

#include <iostream>

#include <absl/strings/str_cat.h>

#include "base/file_io.h"
#include "base/subprocess.h"
#include "tests/testing/dir_watch.h"

namespace stagehand::testing {

testbed::Tgtd* NodeIntegrationTest::tgtd_ = nullptr;
int NodeIntegrationTest::next_tid_ = 1;

void NodeIntegrationTest::SetUpTestSuite() {
  if (!testbed::IntegrationEnabled()) {
    return;
  }
  tgtd_ = new testbed::Tgtd();
  auto s = tgtd_->Start();
  ASSERT_TRUE(s.ok()) << s;
}

void NodeIntegrationTest::TearDownTestSuite() {
  delete tgtd_;
  tgtd_ = nullptr;
}

std::unique_ptr<iscsi::Connection> NodeIntegrationTest::LoginAs(const std::string& name) const {
  iscsi::LoginParams params;
  auto portal = iscsi::ParsePortal(tgtd_->portal());
  EXPECT_TRUE(portal.ok()) << portal.status();
  params.portal = portal.value_or(iscsi::Portal{});
  params.iqn = Iqn();
  params.lun = 1;
  params.initiator_name = name;
  auto conn = iscsi::Connection::Login(params);
  EXPECT_TRUE(conn.ok()) << conn.status();
  return conn.ok() ? std::move(*conn) : nullptr;
}

iscsi::Reservations NodeIntegrationTest::ReservationsNow() const {
  auto conn = LoginAs("iqn.2026-12.dev.stagehand:observer");
  if (conn == nullptr) {
    return {};
  }
  auto r = conn->ReadReservations();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.value_or(iscsi::Reservations{});
}

void NodeIntegrationTest::FreezeTarget() {
  ASSERT_EQ(kill(tgtd_->pid(), SIGSTOP), 0);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(tgtd_->pid()), &info, WSTOPPED | WNOWAIT), 0);
}

void NodeIntegrationTest::ThawTarget() {
  (void)kill(tgtd_->pid(), SIGCONT);
}

void NodeIntegrationTest::SetUp() {
  if (!testbed::IntegrationEnabled()) {
    GTEST_SKIP() << "integration test: needs root and SH_INTEGRATION=1";
  }
  ASSERT_NE(tgtd_, nullptr);
  root_ = testbed::MakeTempRoot();
  ASSERT_FALSE(root_.empty());
  tid_ = next_tid_++;
  daemon_ = std::make_unique<testbed::StagehandDaemon>(root_, DaemonFlags());
  auto s = daemon_->Start();
  ASSERT_TRUE(s.ok()) << s;
}

void NodeIntegrationTest::TearDown() {
  if (root_.empty()) {
    return;
  }
  if (daemon_) {
    daemon_->Kill();
  }
  const auto left = testbed::Leftovers(root_);
  if (HasFailure()) {
    auto log = ReadFileToString(root_ + "/daemon.log");
    std::cerr << "---- daemon log ----\n" << log.value_or("(none)") << "--------------------\n";
  }
  testbed::ForceCleanup(root_);
  if (tgtd_ != nullptr && tgtd_->pid() > 0 && !lun_file_.empty()) {
    (void)tgtd_->DeleteTarget(tid_);
  }
  EXPECT_TRUE(left.empty()) << "left behind: " << ::testing::PrintToString(left);
}

void NodeIntegrationTest::AddLun(uint64_t bytes) {
  lun_file_ = root_ + "/lun.img";
  ASSERT_TRUE(testbed::MakeSparseFile(lun_file_, bytes).ok());
  ASSERT_TRUE(tgtd_->AddTarget(tid_, Iqn()).ok());
  auto s = tgtd_->AddLun(tid_, 1, lun_file_);
  ASSERT_TRUE(s.ok()) << s;
}

std::string NodeIntegrationTest::Iqn() const {
  return absl::StrCat("iqn.2026-11.dev.stagehand:it-", tid_);
}

std::map<std::string, std::string> NodeIntegrationTest::Context() const {
  return {{"targetPortal", tgtd_->portal()}, {"iqn", Iqn()}, {"lun", "1"}};
}

csi::v1::NodeStageVolumeRequest NodeIntegrationTest::StageRequest(
    const std::string& volume_id, bool block, const std::string& fs_type) const {
  csi::v1::NodeStageVolumeRequest req;
  req.set_volume_id(volume_id);
  req.set_staging_target_path(Staging(volume_id));
  auto* cap = req.mutable_volume_capability();
  if (block) {
    cap->mutable_block();
  } else {
    cap->mutable_mount()->set_fs_type(fs_type);
  }
  cap->mutable_access_mode()->set_mode(csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  for (const auto& [k, v] : Context()) {
    (*req.mutable_volume_context())[k] = v;
  }
  return req;
}

csi::v1::NodePublishVolumeRequest NodeIntegrationTest::PublishRequest(const std::string& volume_id,
                                                                      const std::string& target,
                                                                      bool block,
                                                                      bool readonly) const {
  csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id(volume_id);
  req.set_staging_target_path(Staging(volume_id));
  req.set_target_path(target);
  req.set_readonly(readonly);
  auto* cap = req.mutable_volume_capability();
  if (block) {
    cap->mutable_block();
  } else {
    cap->mutable_mount()->set_fs_type("ext4");
  }
  cap->mutable_access_mode()->set_mode(csi::v1::VolumeCapability::AccessMode::SINGLE_NODE_WRITER);
  return req;
}

grpc::Status NodeIntegrationTest::Stage(const csi::v1::NodeStageVolumeRequest& req) {
  csi::v1::NodeStageVolumeResponse resp;
  return daemon_->node().NodeStageVolume(testbed::Ctx().get(), req, &resp);
}

grpc::Status NodeIntegrationTest::Publish(const csi::v1::NodePublishVolumeRequest& req) {
  csi::v1::NodePublishVolumeResponse resp;
  return daemon_->node().NodePublishVolume(testbed::Ctx().get(), req, &resp);
}

grpc::Status NodeIntegrationTest::Unpublish(const std::string& volume_id,
                                            const std::string& target) {
  csi::v1::NodeUnpublishVolumeRequest req;
  req.set_volume_id(volume_id);
  req.set_target_path(target);
  csi::v1::NodeUnpublishVolumeResponse resp;
  return daemon_->node().NodeUnpublishVolume(testbed::Ctx().get(), req, &resp);
}

grpc::Status NodeIntegrationTest::Unstage(const std::string& volume_id,
                                          const std::string& staging) {
  csi::v1::NodeUnstageVolumeRequest req;
  req.set_volume_id(volume_id);
  req.set_staging_target_path(staging);
  csi::v1::NodeUnstageVolumeResponse resp;
  return daemon_->node().NodeUnstageVolume(testbed::Ctx().get(), req, &resp);
}

grpc::Status NodeIntegrationTest::Stats(const std::string& volume_id, const std::string& path,
                                        csi::v1::NodeGetVolumeStatsResponse* resp) {
  csi::v1::NodeGetVolumeStatsRequest req;
  req.set_volume_id(volume_id);
  req.set_volume_path(path);
  return daemon_->node().NodeGetVolumeStats(testbed::Ctx().get(), req, resp);
}

grpc::Status NodeIntegrationTest::Health(const std::string& volume_id,
                                         csi::v1::NodeGetVolumeHealthResponse* resp) {
  csi::v1::NodeGetVolumeHealthRequest req;
  req.set_volume_id(volume_id);
  return daemon_->node().NodeGetVolumeHealth(testbed::Ctx().get(), req, resp);
}

grpc::Status NodeIntegrationTest::StorageHealth(csi::v1::NodeGetStorageHealthResponse* resp) {
  return daemon_->node().NodeGetStorageHealth(testbed::Ctx().get(), {}, resp);
}

std::string NodeIntegrationTest::SessionDir() const {
  auto out = RunProcess({"ls", daemon_->runtime_dir() + "/sessions"});
  return daemon_->runtime_dir() + "/sessions/" +
         (out.ok() ? out->output.substr(0, out->output.find('\n')) : "");
}

std::optional<state::v1::SessionStatus> NodeIntegrationTest::SessionNow() const {
  auto raw = ReadFileToString(SessionDir() + "/status");
  state::v1::SessionStatus status;
  if (!raw.ok() || !status.ParseFromString(*raw)) {
    return std::nullopt;
  }
  return status;
}

bool NodeIntegrationTest::WaitForStatus(
    const std::function<bool(const state::v1::SessionStatus&)>& done) const {
  return WaitUntilInDir(SessionDir(), IN_MOVED_TO, std::chrono::seconds(60), [&] {
    auto status = SessionNow();
    return status.has_value() && done(*status);
  });
}

}  // namespace stagehand::testing

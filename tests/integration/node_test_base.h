#pragma once

// Fixture for integration tests of the built-in driver: one tgtd per test suite, a fresh temp
// root, LUN and daemon per test, and a teardown that asserts nothing is left behind.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "iscsi/libiscsi_connection.h"
#include "iscsi/persistent_reservation.h"
#include "proto/state.pb.h"
#include "testbed/stagehand_daemon.h"
#include "testbed/tgtd.h"

namespace stagehand::testing {

class NodeIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  static void TearDownTestSuite();
  void SetUp() override;
  void TearDown() override;

  // Flags the per-test daemon gets beyond the standard ones (root_ is set when this is called).
  virtual std::vector<std::string> DaemonFlags() const { return {}; }

  // Creates target `tid_` with one LUN backed by a fresh sparse file of `bytes`.
  void AddLun(uint64_t bytes = 128ull << 20);
  std::string Iqn() const;
  std::map<std::string, std::string> Context() const;

  csi::v1::NodeStageVolumeRequest StageRequest(const std::string& volume_id, bool block = false,
                                               const std::string& fs_type = "ext4") const;
  csi::v1::NodePublishVolumeRequest PublishRequest(const std::string& volume_id,
                                                   const std::string& target, bool block = false,
                                                   bool readonly = false) const;
  grpc::Status Stage(const csi::v1::NodeStageVolumeRequest& req);
  grpc::Status Publish(const csi::v1::NodePublishVolumeRequest& req);
  grpc::Status Unpublish(const std::string& volume_id, const std::string& target);
  grpc::Status Unstage(const std::string& volume_id, const std::string& staging);
  grpc::Status Stats(const std::string& volume_id, const std::string& path,
                     csi::v1::NodeGetVolumeStatsResponse* resp);
  // NodeGetVolumeHealth of all the volume's paths; NodeGetStorageHealth.
  grpc::Status Health(const std::string& volume_id, csi::v1::NodeGetVolumeHealthResponse* resp);
  grpc::Status StorageHealth(csi::v1::NodeGetStorageHealthResponse* resp);

  std::string Staging(const std::string& volume_id) const { return root_ + "/stg-" + volume_id; }

  // The runtime directory of the (first) userspace session, and what its process says.
  std::string SessionDir() const;
  std::optional<state::v1::SessionStatus> SessionNow() const;
  // Waits (inotify on the session's directory, up to a minute) until its status satisfies
  // `done`.
  bool WaitForStatus(const std::function<bool(const state::v1::SessionStatus&)>& done) const;

  // A login to LUN 1 of this test's target as the initiator `name` (null, with a failure, when
  // it fails).
  std::unique_ptr<iscsi::Connection> LoginAs(const std::string& name) const;
  // What the target says of LUN 1's persistent reservation, through a login that registers
  // nothing.
  iscsi::Reservations ReservationsNow() const;

  // Stops tgtd with SIGSTOP (a hung target: its TCP connections stay open and nothing answers)
  // and waits until it is stopped; ThawTarget continues it.
  static void FreezeTarget();
  static void ThawTarget();

  static testbed::Tgtd* tgtd_;
  static int next_tid_;
  int tid_ = 0;
  std::string root_;
  std::string lun_file_;
  std::unique_ptr<testbed::StagehandDaemon> daemon_;
};

}  // namespace stagehand::testing

#pragma once

// The built-in iSCSI driver as every agent runs it: the node's transports, the CSI Identity and
// Node services on the CSI socket, the registration socket (and the record of what the
// registering side said), and the replacement of session processes of an earlier build.

#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include <grpcpp/server.h>

#include "agent/daemon_options.h"
#include "base/event_loop.h"
#include "base/status.h"
#include "base/task_runner.h"
#include "driver/identity_service.h"
#include "driver/node_service.h"
#include "mounter/blkid_block_probe.h"
#include "mounter/libmount_mounter.h"
#include "registration/registrar.h"
#include "registration/registrar_record.h"
#include "transport/kernel/kernel_transport.h"
#include "transport/registry.h"
#include "transport/userspace/userspace_transport.h"

namespace stagehand::agent {

class BuiltinDriver {
 public:
  // Resolves the initiator name, starts the transports, serves CSI on the resolved endpoint's
  // socket (the caller holds its lock) and creates the registration socket. `loop` runs the
  // upgrade retries and must outlive the driver. On failure, stops what it started.
  static absl::StatusOr<std::unique_ptr<BuiltinDriver>> Start(const DaemonOptions& options,
                                                              EventLoop& loop);

  // Stops replacing session processes, then removes the registration socket, then stops the
  // CSI server (calls in flight get 10 s) and removes its socket. Volumes stay as they are.
  ~BuiltinDriver();
  BuiltinDriver(const BuiltinDriver&) = delete;
  BuiltinDriver& operator=(const BuiltinDriver&) = delete;

  // Replaces the session processes of an earlier build, one volume at a time, on a thread of its
  // own; again after a minute while some could not be replaced yet (reconnecting).
  void StartUpgrades();
  // Stops replacing them (finishes the volume it is at). Idempotent.
  void StopUpgrades();

  driver::NodeService& node() { return *node_; }

  transport::Registry& transports() { return transports_; }

  const registration::RegistrarRecord& registrar_record() const { return *registrar_record_; }

  // "systemd" or "detached".
  const std::string& session_launcher() const { return session_launcher_; }

  // What it found wrong at start that it serves on regardless (a broken session binary).
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  BuiltinDriver(const DaemonOptions& options, EventLoop& loop);

  absl::Status StartTransports();
  absl::Status StartCsiServer(const std::string& initiator);
  absl::Status StartRegistrar();
  void PostUpgrades();

  const DaemonOptions options_;
  EventLoop& loop_;
  const std::string csi_socket_;
  std::string session_launcher_;
  std::vector<std::string> problems_;
  std::unique_ptr<transport::userspace::UserspaceTransport> userspace_;
  std::unique_ptr<transport::kernel::KernelTransport> kernel_;
  transport::Registry transports_;
  mounter::LibmountMounter mounter_;
  mounter::BlkidBlockProbe probe_;
  std::unique_ptr<driver::NodeService> node_;
  std::unique_ptr<driver::IdentityService> identity_;
  std::unique_ptr<grpc::Server> csi_server_;
  std::unique_ptr<registration::RegistrarRecord> registrar_record_;
  std::unique_ptr<registration::Registrar> registrar_;
  std::stop_source upgrades_stop_;
  std::unique_ptr<TaskRunner> upgrades_;
  std::unique_ptr<LoopTimer> upgrade_retry_;
};

}  // namespace stagehand::agent

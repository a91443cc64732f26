#pragma once

// A CSI node plugin peer for the watcher's integration tests: a real registration socket and a
// real CSI endpoint (unix sockets, gRPC), with answers the test controls: what GetInfo says,
// whether Probe reports ready, and whether NodeGetInfo blocks until released. It records every
// NotifyRegistrationStatus it receives.

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/server.h>

#include "base/status.h"
#include "proto/pluginregistration.pb.h"

namespace stagehand::testing {

struct Notification {
  bool registered = false;
  std::string error;
};

class FakePlugin {
 public:
  // `name`: driver name in GetInfo and GetPluginInfo. Sockets are `<dir>/<file>-reg.sock` and
  // `<endpoint_dir>/<file>.csi`.
  FakePlugin(std::string dir, std::string endpoint_dir, std::string file, std::string name);
  ~FakePlugin();
  FakePlugin(const FakePlugin&) = delete;
  FakePlugin& operator=(const FakePlugin&) = delete;

  // Edit before serving.
  pluginregistration::PluginInfo& info() { return info_; }

  // Starts the CSI endpoint / the registration socket.
  absl::Status ServeEndpoint();
  absl::Status ServeRegistration();
  // Stops serving the registration socket and removes it.
  void RemoveRegistration();
  // Stops serving the endpoint (its socket file goes too).
  void StopEndpoint();

  void SetReady(bool ready);
  // NodeGetInfo blocks until Release() (or the caller cancels).
  void BlockNodeGetInfo();
  void Release();
  // Waits until NodeGetInfo has been entered while blocked.
  bool WaitNodeGetInfoEntered(int seconds);

  // Waits until at least `count` notifications arrived; returns them all.
  std::vector<Notification> WaitNotifications(size_t count, int seconds);
  std::vector<Notification> notifications();

  std::string registration_path() const { return dir_ + "/" + file_ + "-reg.sock"; }

  std::string endpoint_path() const { return endpoint_dir_ + "/" + file_ + ".csi"; }

 private:
  class RegistrationService;
  class IdentityService;
  class NodeService;

  std::string dir_;
  std::string endpoint_dir_;
  std::string file_;
  pluginregistration::PluginInfo info_;
  std::unique_ptr<RegistrationService> registration_service_;
  std::unique_ptr<IdentityService> identity_service_;
  std::unique_ptr<NodeService> node_service_;
  std::unique_ptr<grpc::Server> registration_server_;
  std::unique_ptr<grpc::Server> endpoint_server_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = true;
  bool block_ = false;
  bool entered_ = false;
  std::vector<Notification> notifications_;
};

}  // namespace stagehand::testing

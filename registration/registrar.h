#pragma once

// The driver side of plugin registration: the registration socket node-driver-registrar would
// create for our built-in driver, `<registration_dir>/<driver_name>-reg.sock`, serving
// pluginregistration.Registration so that a kubelet (or stagehand's own PluginWatcher) finds us.
//
// GetInfo answers type CSIPlugin, the driver name, `endpoint` and `versions`. A registration
// rejected through NotifyRegistrationStatus is logged and kept in status(); the registrar then
// re-creates its socket after a backoff, which the watcher sees as a new plugin. It never exits.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/server.h>

#include "base/backoff.h"
#include "base/clock.h"
#include "base/mutex.h"
#include "base/status.h"

namespace stagehand::registration {

struct RegistrarOptions {
  std::string registration_dir;
  std::string driver_name;
  std::string endpoint;  // The CSI socket path as the registering side must dial it.
  std::vector<std::string> versions = {"1.0.0"};
  BackoffPolicy backoff;
};

struct RegistrarStatus {
  bool registered = false;  // The last NotifyRegistrationStatus said registered.
  bool notified = false;    // Any NotifyRegistrationStatus arrived since the socket was made.
  std::string last_error;   // The last rejection reason; empty after a success.
  int rejections = 0;       // Rejections since the last success.
  std::string socket_path;
};

// Called (on a gRPC thread, without locks held) after every NotifyRegistrationStatus.
using RegistrarListener = std::function<void(const RegistrarStatus&)>;

class Registrar {
 public:
  // Creates the directory (0700) and the socket, replacing a stale socket file. FailedPrecondition
  // when another process is serving that socket.
  static absl::StatusOr<std::unique_ptr<Registrar>> Start(RegistrarOptions options,
                                                          RegistrarListener listener = nullptr,
                                                          const Clock& clock = RealClock::Get());

  Registrar(const Registrar&) = delete;
  Registrar& operator=(const Registrar&) = delete;

  // Stops serving and removes the socket.
  ~Registrar();

  // Thread-safe.
  RegistrarStatus status() const;

  const std::string& socket_path() const { return socket_path_; }

 private:
  class Service;

  Registrar(RegistrarOptions options, RegistrarListener listener, const Clock& clock);

  absl::Status Serve();
  void OnStatus(bool registered, const std::string& error);
  void RecordStatus(bool registered, const std::string& error);
  // Starts recreator_ unless it runs, the registrar is stopping or Start has not finished.
  void StartRecreator() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Recreate(const std::stop_token& token) ABSL_LOCKS_EXCLUDED(mu_);

  RegistrarOptions options_;
  RegistrarListener listener_;
  std::string socket_path_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;  // Recreate thread only, after Start.
  bool served_ = false;  // The socket file is ours to remove (same owner as server_).

  mutable Mutex mu_;
  std::condition_variable_any cv_;
  RegistrarStatus status_ ABSL_GUARDED_BY(mu_);
  bool recreate_pending_ ABSL_GUARDED_BY(mu_) = false;
  RetrySchedule schedule_ ABSL_GUARDED_BY(mu_);
  // Runs only while a re-creation is pending: started by a rejection, gone once the socket is
  // served again (an agent whose driver is registered has no thread for it).
  std::jthread recreator_ ABSL_GUARDED_BY(mu_);
  bool recreating_ ABSL_GUARDED_BY(mu_) = false;  // recreator_ runs and has not finished.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Start has set server_: no re-creator runs before (it shuts server_ down and replaces it).
  bool started_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace stagehand::registration

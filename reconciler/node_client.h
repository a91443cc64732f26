#pragma once

// How the reconciler reaches CSI drivers: the Node calls it needs, over plain structs. The real
// implementation (agent/) speaks gRPC to the endpoint the plugin registry names; unit tests use
// an in-memory driver.

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "base/status.h"
#include "reconciler/volume_spec.h"

namespace stagehand::reconciler {

struct StageCall {
  std::string volume_handle;
  std::string staging_path;
  Capability capability;
  std::map<std::string, std::string> volume_context;
  std::map<std::string, std::string> publish_context;
  std::string secrets_file;  // Resolved by the client right before the call; never kept.
};

struct PublishCall {
  std::string volume_handle;
  std::string staging_path;
  std::string target_path;
  bool read_only = false;
  Capability capability;
  std::map<std::string, std::string> volume_context;
  std::map<std::string, std::string> publish_context;
};

// One driver. Thread-safe: calls for different volumes run concurrently. Every call returns the
// driver's status (gRPC codes map 1:1 to absl codes) and gives up after `timeout`
// (DeadlineExceeded).
//
// The codes the reconciler acts on, for every method:
//   OK: done; the reconciler records it.
//   DeadlineExceeded, Unavailable, Cancelled, ResourceExhausted, Aborted: the outcome is
//     unknown (IsUncertainCode, plan.h): the stage or publish stays recorded as uncertain, and a
//     later plan repeats the (idempotent) call or undoes it; nothing is forgotten on its strength.
//   any other code: a definite failure, the driver changed nothing: a first stage or publish is
//     forgotten; retried with backoff, the error shown as the volume's last_error.
// And for Unstage and Unpublish only:
//   NotFound: the driver does not know the volume or path, so nothing of it is left: done.
class NodeClient {
 public:
  virtual ~NodeClient() = default;

  virtual absl::Status Stage(const StageCall& call, std::chrono::milliseconds timeout) = 0;
  // NotFound counts as done (see above).
  virtual absl::Status Unstage(const std::string& volume_handle, const std::string& staging_path,
                               std::chrono::milliseconds timeout) = 0;
  virtual absl::Status Publish(const PublishCall& call, std::chrono::milliseconds timeout) = 0;
  // NotFound counts as done (see above).
  virtual absl::Status Unpublish(const std::string& volume_handle, const std::string& target_path,
                                 std::chrono::milliseconds timeout) = 0;
};

// Finds the client of a registered, healthy driver. Thread-safe.
class DriverDirectory {
 public:
  virtual ~DriverDirectory() = default;

  // FailedPrecondition, with the reason, when `driver` is not registered or not healthy.
  virtual absl::StatusOr<std::shared_ptr<NodeClient>> Find(const std::string& driver) = 0;
};

}  // namespace stagehand::reconciler

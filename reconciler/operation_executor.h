#pragma once

// The reconciler's operation executor: runs one stage, publish, unpublish or unstage call through
// the volume's driver (or a record-only operation) on a pool of workers, and tells its listener
// what came of it. Like the kubelet's operation executor it decides nothing: the reconciler plans
// one operation per volume at a time and submits it here.
//
// Every operation records what it is about to do in the ActualStore before its CSI call and what
// came of it after (see reconciler.h), and finds the driver's client itself, so that neither file
// I/O nor channel creation happens under the reconciler's lock.
//
// Workers start when operations outnumber the idle ones, up to `max_parallel`, and leave after
// `worker_idle_timeout` without one: an agent with nothing to do has none.
//
// Thread-safe. The listener is called from the workers, with no lock of the executor held.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "reconciler/actual_state.h"
#include "reconciler/node_client.h"
#include "reconciler/plan.h"
#include "reconciler/volume_spec.h"

namespace stagehand::reconciler {

struct Operation {
  std::string name;  // The volume.
  Op op;
  std::string driver;
  std::optional<ActualVolume> actual;  // What the volume's record says now.
  std::optional<VolumeSpec> spec;      // Its declaration, if it is declared.
  std::string manifest_file;           // The file that declares it now (with `spec`).
};

struct OperationResult {
  std::optional<ActualVolume> actual;  // The volume's record afterwards (nullopt: none).
  absl::Status status;
  // The driver is not registered or not healthy: nothing was done (`status` says why).
  bool blocked = false;
};

class OperationExecutor {
 public:
  struct Options {
    std::string staging_root;
    std::chrono::milliseconds call_timeout{std::chrono::minutes(2)};
    int max_parallel = 8;
    std::chrono::milliseconds worker_idle_timeout{std::chrono::seconds(10)};
  };

  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void OperationDone(const Operation& operation, OperationResult result) = 0;
    // An idle worker left (workers() changed).
    virtual void WorkersChanged() = 0;
  };

  // The references must outlive the executor.
  OperationExecutor(Options options, DriverDirectory& drivers, ActualStore& store,
                    Listener& listener);
  OperationExecutor(const OperationExecutor&) = delete;
  OperationExecutor& operator=(const OperationExecutor&) = delete;
  ~OperationExecutor();

  void Submit(std::vector<Operation> operations) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts no more operations and waits for the running ones (bounded by the call timeout).
  // Operations still queued are dropped without a word to the listener.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  size_t workers() const ABSL_LOCKS_EXCLUDED(mu_);

  // CSI calls made so far (Node*).
  uint64_t node_calls() const { return node_calls_.load(); }

 private:
  void Work(const std::stop_token& token) ABSL_LOCKS_EXCLUDED(mu_);
  OperationResult Execute(const Operation& operation);
  OperationResult Stage(const Operation& operation, NodeClient& client);
  OperationResult Publish(const Operation& operation, NodeClient& client);
  OperationResult Unpublish(const Operation& operation, NodeClient& client);
  OperationResult Unstage(const Operation& operation, NodeClient& client);
  OperationResult RecordFile(const Operation& operation);
  OperationResult Forget(const Operation& operation);

  const Options options_;
  DriverDirectory& drivers_;
  ActualStore& store_;
  Listener& listener_;
  std::atomic<uint64_t> node_calls_{0};

  mutable Mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Operation> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::jthread> workers_ ABSL_GUARDED_BY(mu_);
  // Workers that left when idle; joined by the next Submit or Stop (outside mu_).
  std::vector<std::jthread> finished_ ABSL_GUARDED_BY(mu_);
  size_t idle_ ABSL_GUARDED_BY(mu_) = 0;
  size_t starting_ ABSL_GUARDED_BY(mu_) = 0;  // Started, not waiting for an operation yet.
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace stagehand::reconciler

#pragma once

// The standalone volume manager's reconcile loop: keeps the declared volumes staged and
// published through whichever registered driver they name, and tears down what is no longer
// declared, in the right order (unpublish before unstage).
//
// - Event-driven: Declare/ReportManifestError/RemoveManifest/Poke and finished operations wake
//   the loop; backoff timers and a slow periodic resync (the safety net) are its only timers.
// - At most one operation per volume at a time; operations on different volumes run
//   concurrently on `max_parallel` workers. Per volume, a failed operation is retried with
//   exponential backoff (reset when the operation changes or succeeds).
// - Crash-safe: every stage/publish/unpublish/unstage is recorded as uncertain in the
//   ActualStore before its CSI call, so a restart knows what may exist. A call that fails with a
//   code whose outcome is unknown (DeadlineExceeded, Unavailable, Cancelled, ResourceExhausted,
//   Aborted) leaves the state uncertain: never reported done, always retried or undone.
// - Reconstruction: Start() rebuilds the actual state from the store and the mount table before
//   anything else; what is intact is adopted without a single CSI call. Volumes nobody declares
//   are torn down only after DesiredComplete() (the manifest directory was read).
//
// Thread-safe; all public methods may be called from any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/backoff.h"
#include "base/clock.h"
#include "base/mutex.h"
#include "reconciler/actual_state.h"
#include "reconciler/node_client.h"
#include "reconciler/plan.h"
#include "reconciler/volume_phase.h"

namespace stagehand::reconciler {

struct ReconcilerOptions {
  std::string staging_root;  // Staging paths go under <staging_root>/plugins/kubernetes.io/csi.
  std::chrono::milliseconds call_timeout{std::chrono::minutes(2)};
  BackoffPolicy backoff;  // 500 ms doubling to 2 min, 20 % jitter.
  int max_parallel = 8;
  // A worker without a task for this long exits (another starts when work comes back), so
  // that an agent at rest keeps no threads for a burst that is over.
  std::chrono::milliseconds worker_idle_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds resync_period{std::chrono::minutes(5)};
  // Called (under the reconciler's lock: keep it quick) when an operation fails.
  std::function<void(const std::string& driver, const std::string& operation)> on_failure;
};

struct TargetStatus {
  std::string target_path;
  bool read_only = false;
  std::string state;  // "published", "uncertain", "pending" (declared, not published yet).
};

struct VolumeStatus {
  std::string name;
  std::string manifest_file;
  bool declared = false;
  std::string driver;
  std::string volume_handle;
  std::string staging_path;
  VolumePhase phase = VolumePhase::kPending;
  std::string stage_state;  // "none", "uncertain", "staged".
  std::vector<TargetStatus> targets;
  std::string in_flight;       // Operation running now, if any.
  std::string manifest_error;  // The manifest is broken (the last good spec still applies).
  std::string blocked;         // Why it waits (driver missing, immutable field changed, ...).
  std::string last_error;
  std::string condition;  // The driver reports the volume abnormal: why (ReportCondition).
  int attempts = 0;       // Consecutive failures of the current operation.
  std::optional<std::chrono::system_clock::time_point> next_retry;
};

struct ReconcilerStatus {
  uint64_t generation = 0;
  bool ready = false;  // Reconstruction and the first reconcile after DesiredComplete are done.
  std::vector<VolumeStatus> volumes;
  std::map<std::string, std::string> manifest_errors;  // By file, for files with no volume.
  std::vector<std::string> store_errors;
  size_t workers = 0;  // Worker threads alive (they start with work and leave when idle).
};

class Reconciler {
 public:
  // The references must outlive the reconciler.
  Reconciler(ReconcilerOptions options, DriverDirectory& drivers, ActualStore& store,
             MountTable& mounts, const Clock& clock = RealClock::Get());
  Reconciler(const Reconciler&) = delete;
  Reconciler& operator=(const Reconciler&) = delete;
  // Stops the loop and waits for running operations to finish.
  ~Reconciler();

  // Reconstructs the actual state and starts the loop and the workers.
  absl::Status Start();

  // Desired state, from the manifest source.
  void Declare(const std::string& file, VolumeSpec spec);
  void ReportManifestError(const std::string& file, const std::string& error);
  void RemoveManifest(const std::string& file);
  // `from` was renamed to `to`: its volume stays declared, now by `to` (no teardown).
  void RenameManifest(const std::string& from, const std::string& to);
  // Every manifest present at start has been reported: undeclared volumes may be torn down.
  void DesiredComplete();

  // Re-plans every volume now (a driver registered or changed health; a test moved the clock).
  void Poke();

  // What the driver last said of the volume's health (NodeGetVolumeStats): `abnormal` is why
  // it is abnormal, empty when healthy. Shown in its status; unknown volumes are ignored.
  void ReportCondition(const std::string& name, const std::string& abnormal);

  ReconcilerStatus Status() const;
  // Bumped on every change of the status; cheap (also a liveness check of the loop's lock).
  uint64_t Generation() const;
  // Status().ready without copying the status (probes ask often).
  bool Ready() const;
  // Returns the status once its generation exceeds `generation`, or after `timeout`.
  ReconcilerStatus WaitForChange(uint64_t generation, std::chrono::milliseconds timeout) const;

  // CSI calls made so far (Node*), for tests and benchmarks.
  uint64_t node_calls() const { return node_calls_.load(); }

 private:
  struct Entry {
    std::optional<ActualVolume> actual;
    bool in_flight = false;
    Op in_flight_op;
    Op current_op;  // The operation the backoff belongs to.
    std::unique_ptr<RetrySchedule> schedule;
    std::string last_error;
    std::string blocked;
    std::string condition;  // ReportCondition.
    std::optional<std::chrono::system_clock::time_point> next_retry;
  };

  struct Task {
    std::string name;
    Op op;
    std::optional<ActualVolume> actual;
    std::optional<VolumeSpec> spec;
    std::string manifest_file;
    std::shared_ptr<NodeClient> client;
  };

  struct Result {
    std::optional<ActualVolume> actual;
    absl::Status status;
  };

  void Loop(const std::stop_token& token) ABSL_LOCKS_EXCLUDED(mu_);
  void Work(const std::stop_token& token) ABSL_LOCKS_EXCLUDED(mu_);
  // Plans the volumes marked dirty (all of them after Poke, resync or DesiredComplete) and
  // those whose backoff has passed.
  void PlanDirty() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PlanOne(const std::string& name, Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkDirty(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkAllDirty() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void VerifyMounts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The operations run without the lock (workers).
  Result Execute(Task& task) ABSL_LOCKS_EXCLUDED(mu_);
  Result Stage(Task& task) ABSL_LOCKS_EXCLUDED(mu_);
  Result Publish(Task& task) ABSL_LOCKS_EXCLUDED(mu_);
  Result Unpublish(Task& task) ABSL_LOCKS_EXCLUDED(mu_);
  Result Unstage(Task& task) ABSL_LOCKS_EXCLUDED(mu_);
  Entry& EntryFor(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Persists `file` as the volume's manifest file when it changed.
  void RecordManifestFile(const std::string& name, Entry& entry, const std::string& file)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Changed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  VolumeStatus StatusOf(const std::string& name, const Entry* entry) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ReconcilerOptions options_;
  DriverDirectory& drivers_;
  ActualStore& store_;
  MountTable& mounts_;
  const Clock& clock_;
  std::atomic<uint64_t> node_calls_{0};

  mutable Mutex mu_;
  mutable std::condition_variable_any cv_;          // Loop wake-ups.
  mutable std::condition_variable_any changed_cv_;  // Status watchers.
  mutable std::condition_variable_any work_cv_;     // Workers.
  bool dirty_ ABSL_GUARDED_BY(mu_) = true;
  bool plan_all_ ABSL_GUARDED_BY(mu_) = true;
  std::set<std::string> dirty_names_ ABSL_GUARDED_BY(mu_);
  std::multimap<Clock::TimePoint, std::string> timers_ ABSL_GUARDED_BY(mu_);  // Backoff expiries.
  // Staging path -> the volume waiting for another volume's record of it to go.
  std::map<std::string, std::string> waiting_on_staging_ ABSL_GUARDED_BY(mu_);
  bool desired_complete_ ABSL_GUARDED_BY(mu_) = false;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);       // By volume name.
  std::map<std::string, VolumeSpec> desired_ ABSL_GUARDED_BY(mu_);  // By volume name.
  std::map<std::string, std::string> file_of_name_
      ABSL_GUARDED_BY(mu_);  // Volume name -> manifest file.
  std::map<std::string, std::string> name_of_file_
      ABSL_GUARDED_BY(mu_);  // Manifest file -> volume name.
  std::map<std::string, std::string> manifest_errors_
      ABSL_GUARDED_BY(mu_);  // Manifest file -> error.
  std::vector<std::string> store_errors_ ABSL_GUARDED_BY(mu_);
  std::deque<Task> tasks_ ABSL_GUARDED_BY(mu_);
  Clock::TimePoint next_resync_ ABSL_GUARDED_BY(mu_);

  // Workers start when tasks outnumber the idle ones, up to max_parallel, and exit after
  // worker_idle_timeout without a task: an agent with nothing to do has none. No worker starts
  // once stopping_.
  std::vector<std::jthread> workers_ ABSL_GUARDED_BY(mu_);
  size_t idle_workers_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::jthread loop_;
};

}  // namespace stagehand::reconciler

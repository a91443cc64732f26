#pragma once

// The standalone volume manager's reconcile loop: keeps the declared volumes staged and
// published through whichever registered driver they name, and tears down what is no longer
// declared, in the right order (unpublish before unstage).
//
// - Event-driven: Declare/ReportManifestError/RemoveManifest/Poke and finished operations
//   schedule a planning round on the event loop; backoff timers and a slow periodic resync (the
//   safety net) are its only timers. A round plans and submits; it never waits for a driver.
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
// In the kubelet's shape: the desired state (desired_state.h), the actual state (actual_state.h),
// reconstruction (reconstruction.h), the operation executor (operation_executor.h) and the status
// view (status_view.h) are parts of their own; this class is the loop that plans one operation per
// volume from the first two and hands it to the executor. Nothing under its lock does file I/O or
// creates a channel: the executor records and calls, and the periodic mount check reads the mount
// table before it takes the lock.
//
// Thread-safe; all public methods may be called from any thread.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/backoff.h"
#include "base/clock.h"
#include "base/event_loop.h"
#include "base/mutex.h"
#include "reconciler/actual_state.h"
#include "reconciler/desired_state.h"
#include "reconciler/node_client.h"
#include "reconciler/operation_executor.h"
#include "reconciler/operation_state.h"
#include "reconciler/plan.h"
#include "reconciler/status_view.h"
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

class Reconciler final : private OperationExecutor::Listener {
 public:
  // The references must outlive the reconciler. Its rounds run on `loop`, or on a thread of its
  // own when that is null.
  Reconciler(ReconcilerOptions options, DriverDirectory& drivers, ActualStore& store,
             MountTable& mounts, const Clock& clock = RealClock::Get(), EventLoop* loop = nullptr);
  Reconciler(const Reconciler&) = delete;
  Reconciler& operator=(const Reconciler&) = delete;
  // Stops planning and waits for running operations to finish.
  ~Reconciler() override;

  // Reconstructs the actual state and schedules the first round.
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
  uint64_t node_calls() const { return executor_.node_calls(); }

 private:
  // OperationExecutor::Listener (from the workers, without the lock).
  void OperationDone(const Operation& operation, OperationResult result) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void WorkersChanged() override ABSL_LOCKS_EXCLUDED(mu_);

  // Plans what is dirty or due, submits it, and schedules the next round for the first
  // backoff expiry or the resync. On the loop.
  void Round() ABSL_LOCKS_EXCLUDED(mu_);
  // Plans the volumes marked dirty (all of them after Poke, resync or DesiredComplete) and
  // those whose backoff has passed; returns the operations to submit.
  std::vector<Operation> PlanDirty() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PlanOne(const std::string& name, OperationState& ops, std::vector<Operation>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks `op` in flight and adds it to `out`.
  void Dispatch(const std::string& name, OperationState& ops, const Op& op, const VolumeSpec* spec,
                const ActualVolume* actual, std::vector<Operation>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a finished kRecordFile does to the volume's backoff.
  void RecordFileDone(const std::string& name, OperationState& ops, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The periodic safety net (the mount table is read with the lock let go): volumes at rest,
  // with the operations each has finished; one that changes while the table is read is left for
  // the next round.
  std::map<std::string, uint64_t> RestingVolumes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks staging and publish mounts of `resting` volumes that are not in `mounted` as uncertain.
  void VerifyMounts(const std::map<std::string, uint64_t>& resting,
                    const absl::StatusOr<std::set<std::string>>& mounted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkDirty(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkAllDirty() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A volume waiting for `staging_path` to be free (another name's record of it) may go on.
  void StagingPathFreed(const std::string& staging_path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  OperationState& OperationsOf(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Changed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ReconcilerOptions options_;
  ActualStore& store_;
  MountTable& mounts_;
  const Clock& clock_;

  mutable Mutex mu_;
  mutable std::condition_variable_any changed_cv_;  // Status watchers.
  DesiredState desired_ ABSL_GUARDED_BY(mu_);
  ActualState actual_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, OperationState> operations_ ABSL_GUARDED_BY(mu_);  // By volume name.
  bool plan_all_ ABSL_GUARDED_BY(mu_) = true;
  std::set<std::string> dirty_names_ ABSL_GUARDED_BY(mu_);
  std::multimap<Clock::TimePoint, std::string> timers_ ABSL_GUARDED_BY(mu_);  // Backoff expiries.
  // Staging path -> the volume waiting for another volume's record of it to go.
  std::map<std::string, std::string> waiting_on_staging_ ABSL_GUARDED_BY(mu_);
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<std::string> store_errors_ ABSL_GUARDED_BY(mu_);
  Clock::TimePoint next_resync_ ABSL_GUARDED_BY(mu_);
  SplitMix64 seeds_ ABSL_GUARDED_BY(mu_);  // One seed per volume's retry schedule.

  // Declared after the state its workers report into, so that it is stopped first.
  OperationExecutor executor_;
  EventLoop* loop_;
  std::unique_ptr<LoopThread> own_loop_;  // When given no loop.
  // Set by Start; closed first by the destructor (Changed() schedules it under mu_).
  std::unique_ptr<LoopTimer> round_ ABSL_GUARDED_BY(mu_);
};

}  // namespace stagehand::reconciler

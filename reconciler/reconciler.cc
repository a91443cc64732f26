#include "reconciler/reconciler.h"

#include <algorithm>
#include <random>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "base/log.h"
#include "reconciler/reconstruction.h"

namespace stagehand::reconciler {
namespace {

constexpr LogComponent kComponent = LogComponent::kReconciler;

// Operations that call the driver (the others only touch the volume's record).
bool CallsDriver(OpKind kind) {
  return kind == OpKind::kStage || kind == OpKind::kPublish || kind == OpKind::kUnpublish ||
         kind == OpKind::kUnstage;
}

}  // namespace

Reconciler::Reconciler(ReconcilerOptions options, DriverDirectory& drivers, ActualStore& store,
                       MountTable& mounts, const Clock& clock, EventLoop* loop)
    : options_(std::move(options)),
      store_(store),
      mounts_(mounts),
      clock_(clock),
      next_resync_(clock.Now() + options_.resync_period),
      seeds_(std::random_device{}()),
      executor_({.staging_root = options_.staging_root,
                 .call_timeout = options_.call_timeout,
                 .max_parallel = options_.max_parallel,
                 .worker_idle_timeout = options_.worker_idle_timeout},
                drivers, store, *this),
      loop_(loop) {
  if (loop_ == nullptr) {
    own_loop_ = std::make_unique<LoopThread>();
    loop_ = &own_loop_->loop();
  }
}

Reconciler::~Reconciler() {
  LoopTimer* round = nullptr;
  {
    MutexLock lock(mu_);
    round = round_.get();
  }
  if (round != nullptr) {
    round->Close();  // Waits for a round in progress; none starts after it.
  }
  executor_.Stop();
}

absl::Status Reconciler::Start() {
  SH_ASSIGN_OR_RETURN(Reconstruction reconstruction, Reconstruct(store_, mounts_));
  {
    MutexLock lock(mu_);
    store_errors_ = reconstruction.errors;
    for (auto& volume : reconstruction.volumes) {
      OperationsOf(volume.name);
      actual_.Set(std::move(volume));
    }
    Changed();
  }
  for (const auto& e : reconstruction.errors) {
    Log(kComponent).error("reconciler: unreadable volume record, ignoring: {}", e);
  }
  Log(kComponent)
      .info("reconciler: reconstructed {} volume(s): {} intact, {} to finish or undo",
            reconstruction.intact + reconstruction.repair, reconstruction.intact,
            reconstruction.repair);
  MutexLock lock(mu_);
  round_ = std::make_unique<LoopTimer>(*loop_, [this] { Round(); });
  round_->ScheduleNow();
  return absl::OkStatus();
}

void Reconciler::Declare(const std::string& file, VolumeSpec spec) {
  MutexLock lock(mu_);
  const std::string name = spec.name;
  const std::vector<std::string> changed = desired_.Declare(file, std::move(spec));
  for (const auto& n : changed) {
    MarkDirty(n);
  }
  if (!changed.empty()) {
    OperationsOf(name);
  }
  Changed();
}

void Reconciler::ReportManifestError(const std::string& file, const std::string& error) {
  MutexLock lock(mu_);
  desired_.ReportError(file, error);
  MarkAllDirty();  // Rare; the volume of a file without a good spec is found by its record.
  Changed();
}

void Reconciler::RemoveManifest(const std::string& file) {
  MutexLock lock(mu_);
  desired_.Remove(file);
  MarkAllDirty();  // A file that was only broken protected a volume known by its record.
  Changed();
}

void Reconciler::RenameManifest(const std::string& from, const std::string& to) {
  MutexLock lock(mu_);
  // The renamed volume's record learns its new file from its next operation (kRecordFile when
  // it has nothing else to do), so that a broken file protects it also after a restart.
  for (const auto& name : desired_.Rename(from, to)) {
    MarkDirty(name);
  }
  Changed();
}

void Reconciler::DesiredComplete() {
  MutexLock lock(mu_);
  desired_.SetComplete();
  MarkAllDirty();
  Changed();
}

void Reconciler::ReportCondition(const std::string& name, const std::string& abnormal) {
  MutexLock lock(mu_);
  auto it = operations_.find(name);
  if (it == operations_.end() || it->second.condition == abnormal) {
    return;
  }
  it->second.condition = abnormal;
  Changed();
}

void Reconciler::Poke() {
  MutexLock lock(mu_);
  MarkAllDirty();
  Changed();
}

void Reconciler::MarkDirty(const std::string& name) {
  dirty_names_.insert(name);
}

void Reconciler::MarkAllDirty() {
  plan_all_ = true;
}

void Reconciler::Changed() {
  ++generation_;
  if (round_) {
    round_->ScheduleNow();
  }
  changed_cv_.notify_all();
}

OperationState& Reconciler::OperationsOf(const std::string& name) {
  OperationState& ops = operations_[name];
  if (!ops.schedule) {
    ops.schedule = std::make_unique<RetrySchedule>(clock_, options_.backoff, seeds_());
  }
  return ops;
}

void Reconciler::StagingPathFreed(const std::string& staging_path) {
  if (auto w = waiting_on_staging_.find(staging_path); w != waiting_on_staging_.end()) {
    MarkDirty(w->second);
    waiting_on_staging_.erase(w);
  }
}

void Reconciler::Round() {
  MutexLock lock(mu_);
  if (clock_.Now() >= next_resync_) {
    next_resync_ = clock_.Now() + options_.resync_period;
    const std::map<std::string, uint64_t> resting = RestingVolumes();
    lock.Unlock();
    auto mounted = mounts_.MountPoints();
    lock.Lock();
    VerifyMounts(resting, mounted);
    MarkAllDirty();
  }
  std::vector<Operation> operations = PlanDirty();
  if (desired_.complete() && !ready_) {
    ready_ = true;
    ++generation_;
    changed_cv_.notify_all();
  }
  if (!operations.empty()) {
    ++generation_;
    changed_cv_.notify_all();
    lock.Unlock();
    executor_.Submit(std::move(operations));
    lock.Lock();
  }
  Clock::TimePoint until = next_resync_;
  if (!timers_.empty() && timers_.begin()->first < until) {
    until = timers_.begin()->first;
  }
  // `clock_` may be a test's manual clock: the wait is how far it has to go.
  const auto delay = std::max(until - clock_.Now(), Clock::TimePoint::duration::zero());
  round_->ScheduleAt(std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(delay));
}

std::vector<Operation> Reconciler::PlanDirty() {
  const auto now = clock_.Now();
  while (!timers_.empty() && timers_.begin()->first <= now) {
    dirty_names_.insert(timers_.begin()->second);
    timers_.erase(timers_.begin());
  }
  std::vector<std::string> names;
  if (plan_all_) {
    for (const auto& [name, ops] : operations_) {
      names.push_back(name);
    }
    timers_.clear();  // Every waiting volume is planned now and re-arms its timer.
  } else {
    names.assign(dirty_names_.begin(), dirty_names_.end());
  }
  plan_all_ = false;
  dirty_names_.clear();
  std::vector<Operation> out;
  for (const auto& name : names) {
    auto it = operations_.find(name);
    if (it == operations_.end()) {
      continue;
    }
    PlanOne(name, it->second, out);
    if (!it->second.in_flight && actual_.Find(name) == nullptr && desired_.Find(name) == nullptr) {
      operations_.erase(it);
      ++generation_;
    }
  }
  return out;
}

void Reconciler::PlanOne(const std::string& name, OperationState& ops,
                         std::vector<Operation>& out) {
  if (ops.in_flight) {
    ops.replan = true;  // Planned again when it is done.
    return;
  }
  const VolumeSpec* spec = desired_.Find(name);
  const ActualVolume* actual = actual_.Find(name);
  bool keep = !desired_.complete();
  if (spec == nullptr && actual != nullptr && desired_.ErrorOf(actual->manifest_file) != nullptr) {
    keep = true;
  }
  Plan plan = ComputePlan(spec, actual, keep);
  std::string blocked = plan.blocked;
  const std::string file = spec != nullptr ? desired_.FileOf(name) : "";
  // A renamed manifest is recorded before anything else, so that the new file protects the
  // volume after a restart (should it be broken then) even while the next operation waits for
  // its backoff or its driver. Only a failed record write waits for a backoff of its own.
  if (spec != nullptr && actual != nullptr && actual->manifest_file != file) {
    if (ops.record_failed && !ops.schedule->Due()) {
      timers_.emplace(ops.schedule->next_attempt(), name);
      return;
    }
    Op record;
    record.kind = OpKind::kRecordFile;
    Dispatch(name, ops, record, spec, actual, out);
    return;
  }
  if (plan.op.kind == OpKind::kNone) {
    if (blocked.empty()) {
      ops.last_error.clear();
      ops.next_retry.reset();
    }
    if (ops.blocked != blocked) {
      ops.blocked = blocked;
      ++generation_;
    }
    return;
  }
  if (!(plan.op == ops.current_op)) {
    ops.current_op = plan.op;
    ops.schedule->Succeeded();
    ops.next_retry.reset();
  }
  if (!ops.schedule->Due()) {
    timers_.emplace(ops.schedule->next_attempt(), name);
    return;
  }
  if (plan.op.kind == OpKind::kStage) {
    // The same volume under an old name that is still being torn down: let that finish first.
    const std::string staging =
        actual != nullptr
            ? actual->staging_path
            : StagingPathFor(options_.staging_root, spec->driver, spec->volume_handle);
    if (std::string other = actual_.OtherAt(staging, name); !other.empty()) {
      blocked =
          absl::StrCat("waiting for volume '", other, "' (the same volume handle) to be torn down");
      waiting_on_staging_[staging] = name;
      if (ops.blocked != blocked) {
        ops.blocked = blocked;
        ++generation_;
      }
      return;  // Its removal wakes us (StagingPathFreed).
    }
  }
  Dispatch(name, ops, plan.op, spec, actual, out);
}

void Reconciler::Dispatch(const std::string& name, OperationState& ops, const Op& op,
                          const VolumeSpec* spec, const ActualVolume* actual,
                          std::vector<Operation>& out) {
  ops.in_flight = true;
  ops.in_flight_op = op;
  ops.replan = false;
  Operation operation;
  operation.name = name;
  operation.op = op;
  operation.driver = spec != nullptr ? spec->driver : actual->driver;
  if (actual != nullptr) {
    operation.actual = *actual;
  }
  if (spec != nullptr) {
    operation.spec = *spec;
    operation.manifest_file = desired_.FileOf(name);
  }
  out.push_back(std::move(operation));
}

void Reconciler::RecordFileDone(const std::string& name, OperationState& ops,
                                const absl::Status& status) {
  if (status.ok()) {
    if (ops.record_failed) {
      ops.record_failed = false;
      ops.schedule->Succeeded();
      ops.last_error.clear();
      ops.next_retry.reset();
    }
    return;
  }
  ops.record_failed = true;
  const auto delay = ops.schedule->Failed();
  ops.next_retry = std::chrono::system_clock::now() + delay;
  const std::string error = absl::StrCat("record: ", status.ToString());
  if (error != ops.last_error) {
    Log(kComponent)
        .warn("volume '{}': cannot record its new manifest file: {}; retrying with backoff", name,
              status);
  }
  ops.last_error = error;
}

void Reconciler::OperationDone(const Operation& operation, OperationResult result) {
  MutexLock lock(mu_);
  const std::string& name = operation.name;
  OperationState& ops = OperationsOf(name);
  ops.in_flight = false;
  ++ops.completions;
  if (result.blocked) {
    // Nothing was done; a registry change pokes the loop (or something else asked meanwhile).
    const std::string blocked(result.status.message());
    if (ops.blocked != blocked) {
      Log(kComponent).info("volume '{}' waits: {}", name, blocked);
      ops.blocked = blocked;
    }
    if (ops.replan) {
      MarkDirty(name);
    }
    ops.replan = false;
    Changed();
    return;
  }
  ops.replan = false;
  MarkDirty(name);
  if (operation.op.kind == OpKind::kRecordFile) {
    // Bookkeeping: it leaves the backoff of the volume's real operation alone.
    if (result.actual) {
      actual_.Set(*std::move(result.actual));
    }
    RecordFileDone(name, ops, result.status);
    Changed();
    return;
  }
  if (CallsDriver(operation.op.kind)) {
    ops.blocked.clear();
  }
  if (!result.actual && operation.actual) {
    StagingPathFreed(operation.actual->staging_path);
  }
  if (result.actual) {
    actual_.Set(*std::move(result.actual));
  } else {
    actual_.Erase(name);
  }
  const std::string op = OpKindName(operation.op.kind);
  const std::string& path = operation.op.target_path;
  const std::string where = path.empty() ? "" : " '" + path + "'";
  if (result.status.ok()) {
    ops.schedule->Succeeded();
    ops.last_error.clear();
    ops.next_retry.reset();
    Log(kComponent).info("volume '{}': {}{} done", name, op, where);
  } else {
    if (options_.on_failure && CallsDriver(operation.op.kind)) {
      options_.on_failure(operation.driver, op);
    }
    const auto delay = ops.schedule->Failed();
    ops.next_retry = std::chrono::system_clock::now() + delay;
    const std::string error = absl::StrCat(op, where, ": ", result.status.ToString());
    if (error != ops.last_error) {
      Log(kComponent)
          .warn("volume '{}': {} failed: {}; retrying with backoff", name, op, result.status);
    }
    ops.last_error = error;
  }
  Changed();
}

void Reconciler::WorkersChanged() {
  MutexLock lock(mu_);
  ++generation_;  // The status counts the workers.
  changed_cv_.notify_all();
}

std::map<std::string, uint64_t> Reconciler::RestingVolumes() const {
  std::map<std::string, uint64_t> resting;
  for (const auto& [name, ops] : operations_) {
    if (!ops.in_flight && actual_.Find(name) != nullptr) {
      resting[name] = ops.completions;
    }
  }
  return resting;
}

void Reconciler::VerifyMounts(const std::map<std::string, uint64_t>& resting,
                              const absl::StatusOr<std::set<std::string>>& mounted) {
  if (!mounted.ok()) {
    Log(kComponent)
        .warn("reconciler: cannot read the mount table for the periodic check: {}",
              mounted.status());
    return;
  }
  for (const auto& [name, completions] : resting) {
    auto ops = operations_.find(name);
    ActualVolume* a = actual_.FindMutable(name);
    if (ops == operations_.end() || ops->second.in_flight ||
        ops->second.completions != completions || a == nullptr) {
      continue;
    }
    for (const auto& path : MarkMissingMounts(*a, *mounted)) {
      Log(kComponent)
          .warn("volume '{}': mount at '{}' disappeared; {} again", name, path,
                path == a->staging_path ? "staging" : "publishing");
      ++generation_;
    }
  }
  // (The caller re-plans every volume after this check.)
}

ReconcilerStatus Reconciler::Status() const {
  MutexLock lock(mu_);
  ReconcilerStatus status;
  status.generation = generation_;
  status.ready = ready_;
  status.store_errors = store_errors_;
  status.workers = executor_.workers();
  std::set<std::string> names;
  for (const auto& [name, ops] : operations_) {
    names.insert(name);
  }
  for (const auto& [name, spec] : desired_.volumes()) {
    names.insert(name);
  }
  for (const auto& name : names) {
    auto ops = operations_.find(name);
    status.volumes.push_back(VolumeStatusOf(name, desired_, actual_.Find(name),
                                            ops == operations_.end() ? nullptr : &ops->second));
  }
  status.manifest_errors = desired_.ErrorsWithoutVolume();
  return status;
}

uint64_t Reconciler::Generation() const {
  MutexLock lock(mu_);
  return generation_;
}

bool Reconciler::Ready() const {
  MutexLock lock(mu_);
  return ready_;
}

ReconcilerStatus Reconciler::WaitForChange(uint64_t generation,
                                           std::chrono::milliseconds timeout) const {
  {
    MutexLock lock(mu_);
    changed_cv_.wait_for(mu_, timeout, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return generation_ > generation;
    });
  }
  return Status();
}

}  // namespace stagehand::reconciler

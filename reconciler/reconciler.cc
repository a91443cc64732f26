#include "reconciler/reconciler.h"

#include <algorithm>
#include <set>
#include <thread>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "base/log.h"

namespace stagehand::reconciler {
namespace {

// This component's logger (base/log.h).
spdlog::logger& Log() {
  static spdlog::logger& log = ComponentLog("reconciler");
  return log;
}

}  // namespace

Reconciler::Reconciler(ReconcilerOptions options, DriverDirectory& drivers, ActualStore& store,
                       MountTable& mounts, const Clock& clock)
    : options_(std::move(options)),
      drivers_(drivers),
      store_(store),
      mounts_(mounts),
      clock_(clock),
      next_resync_(clock.Now() + options_.resync_period) {}

Reconciler::~Reconciler() {
  loop_.request_stop();
  std::vector<std::jthread> workers;
  {
    MutexLock lock(mu_);
    stopping_ = true;  // From here on no worker starts.
    for (auto& w : workers_) {
      w.request_stop();
    }
    workers.swap(workers_);
    cv_.notify_all();
    work_cv_.notify_all();
  }
  if (loop_.joinable()) {
    loop_.join();
  }
  workers.clear();  // Joins; a running CSI call finishes (bounded by the call timeout).
}

absl::Status Reconciler::Start() {
  std::vector<std::string> errors;
  std::vector<ActualVolume> records = store_.List(errors);
  auto mounted = mounts_.MountPoints();
  if (!mounted.ok()) {
    return WithContext(mounted.status(), "reading the mount table for reconstruction");
  }
  int adopted = 0;
  int repair = 0;
  {
    MutexLock lock(mu_);
    store_errors_ = errors;
    for (auto& record : records) {
      bool intact = true;
      if (record.stage == StageState::kStaged && !record.capability.block &&
          !mounted->contains(record.staging_path)) {
        record.stage = StageState::kUncertain;
        intact = false;
      }
      if (record.stage != StageState::kStaged) {
        intact = false;
      }
      bool target_lost = false;
      for (auto& t : record.targets) {
        if (t.state == PublishState::kPublished && !mounted->contains(t.target_path)) {
          t.state = PublishState::kUncertain;
          target_lost = true;
        }
        intact = intact && t.state == PublishState::kPublished;
      }
      // A block volume's staging leaves nothing in the mount table; a lost publish (a reboot)
      // means its device may be gone or reused, so the stage is not certain either.
      if (record.capability.block && target_lost && record.stage == StageState::kStaged) {
        record.stage = StageState::kUncertain;
      }
      intact ? ++adopted : ++repair;
      Entry& entry = EntryFor(record.name);
      entry.actual = std::move(record);
    }
    Changed();
  }
  for (const auto& e : errors) {
    Log().error("reconciler: unreadable volume record, ignoring: {}", e);
  }
  Log().info("reconciler: reconstructed {} volume(s): {} intact, {} to finish or undo",
             adopted + repair, adopted, repair);
  loop_ = std::jthread([this](const std::stop_token& token) { Loop(token); });
  return absl::OkStatus();
}

void Reconciler::Declare(const std::string& file, VolumeSpec spec) {
  MutexLock lock(mu_);
  if (auto other = file_of_name_.find(spec.name);
      other != file_of_name_.end() && other->second != file) {
    manifest_errors_[file] =
        absl::StrCat("volume '", spec.name, "' is already declared in '", other->second, "'");
    Changed();
    return;
  }
  // Two names for one volume would share its staging path: unstaging one would pull the
  // filesystem out from under the other.
  for (const auto& [other_name, other] : desired_) {
    if (other_name != spec.name && file_of_name_[other_name] != file &&
        other.driver == spec.driver && other.volume_handle == spec.volume_handle) {
      manifest_errors_[file] = absl::StrCat(
          "volumeHandle '", spec.volume_handle, "' of driver '", spec.driver,
          "' is already declared as volume '", other_name, "' in '", file_of_name_[other_name],
          "'; one volume can be declared once (list several targets under `publish`)");
      Changed();
      return;
    }
  }
  // Two volumes on one target path would mount over each other.
  for (const auto& [other_name, other] : desired_) {
    if (other_name == spec.name || file_of_name_[other_name] == file) {
      continue;
    }
    for (const auto& mine : spec.publish) {
      for (const auto& theirs : other.publish) {
        if (mine.target_path == theirs.target_path) {
          manifest_errors_[file] =
              absl::StrCat("targetPath '", mine.target_path, "' is already a target of volume '",
                           other_name, "' in '", file_of_name_[other_name], "'");
          Changed();
          return;
        }
      }
    }
  }
  if (auto old = name_of_file_.find(file); old != name_of_file_.end() && old->second != spec.name) {
    desired_.erase(old->second);
    file_of_name_.erase(old->second);
    MarkDirty(old->second);
  }
  MarkDirty(spec.name);
  name_of_file_[file] = spec.name;
  file_of_name_[spec.name] = file;
  manifest_errors_.erase(file);
  RecordManifestFile(spec.name, EntryFor(spec.name), file);
  desired_[spec.name] = std::move(spec);
  Changed();
}

void Reconciler::ReportManifestError(const std::string& file, const std::string& error) {
  MutexLock lock(mu_);
  manifest_errors_[file] = error;
  MarkAllDirty();  // Rare; the volume of a file without a good spec is found by its record.
  Changed();
}

void Reconciler::RemoveManifest(const std::string& file) {
  MutexLock lock(mu_);
  manifest_errors_.erase(file);
  MarkAllDirty();  // A file that was only broken protected a volume known by its record.
  if (auto it = name_of_file_.find(file); it != name_of_file_.end()) {
    desired_.erase(it->second);
    file_of_name_.erase(it->second);
    name_of_file_.erase(it);
  }
  Changed();
}

void Reconciler::RecordManifestFile(const std::string& name, Entry& entry,
                                    const std::string& file) {
  // A renamed manifest: remember the new file, so that a broken file protects the volume (also
  // after a restart). An operation in flight records it when it completes.
  if (entry.actual && !entry.in_flight && entry.actual->manifest_file != file) {
    entry.actual->manifest_file = file;
    if (auto s = store_.Save(*entry.actual); !s.ok()) {
      Log().warn("volume '{}': cannot record its new manifest file: {}", name, s);
    }
  }
}

void Reconciler::RenameManifest(const std::string& from, const std::string& to) {
  MutexLock lock(mu_);
  // What `to` declared before it was replaced goes, as if removed.
  if (auto it = name_of_file_.find(to); it != name_of_file_.end()) {
    desired_.erase(it->second);
    file_of_name_.erase(it->second);
    MarkDirty(it->second);
    name_of_file_.erase(it);
  }
  manifest_errors_.erase(to);
  if (auto error = manifest_errors_.find(from); error != manifest_errors_.end()) {
    manifest_errors_[to] = std::move(error->second);
    manifest_errors_.erase(error);
  }
  if (auto it = name_of_file_.find(from); it != name_of_file_.end()) {
    const std::string name = it->second;
    name_of_file_.erase(it);
    name_of_file_[to] = name;
    file_of_name_[name] = to;
    MarkDirty(name);
    RecordManifestFile(name, EntryFor(name), to);
  }
  Changed();
}

void Reconciler::DesiredComplete() {
  MutexLock lock(mu_);
  desired_complete_ = true;
  MarkAllDirty();
  Changed();
}

void Reconciler::ReportCondition(const std::string& name, const std::string& abnormal) {
  MutexLock lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.condition == abnormal) {
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
  dirty_ = true;
  ++generation_;
  cv_.notify_all();
  changed_cv_.notify_all();
}

Reconciler::Entry& Reconciler::EntryFor(const std::string& name) {
  Entry& entry = entries_[name];
  if (!entry.schedule) {
    entry.schedule = std::make_unique<RetrySchedule>(clock_, options_.backoff);
  }
  return entry;
}

void Reconciler::Loop(const std::stop_token& token) {
  MutexLock lock(mu_);
  while (!token.stop_requested()) {
    if (clock_.Now() >= next_resync_) {
      VerifyMounts();
      MarkAllDirty();
      next_resync_ = clock_.Now() + options_.resync_period;
    }
    dirty_ = false;
    PlanDirty();
    if (desired_complete_ && !ready_) {
      ready_ = true;
      ++generation_;
      changed_cv_.notify_all();
    }
    Clock::TimePoint until = next_resync_;
    if (!timers_.empty() && timers_.begin()->first < until) {
      until = timers_.begin()->first;
    }
    const auto delay = std::max(until - clock_.Now(), Clock::TimePoint::duration::zero());
    cv_.wait_for(mu_, token, delay, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return dirty_; });
  }
}

void Reconciler::PlanDirty() {
  const auto now = clock_.Now();
  while (!timers_.empty() && timers_.begin()->first <= now) {
    dirty_names_.insert(timers_.begin()->second);
    timers_.erase(timers_.begin());
  }
  std::vector<std::string> names;
  if (plan_all_) {
    for (const auto& [name, entry] : entries_) {
      names.push_back(name);
    }
    timers_.clear();  // Every waiting volume is planned now and re-arms its timer.
  } else {
    names.assign(dirty_names_.begin(), dirty_names_.end());
  }
  plan_all_ = false;
  dirty_names_.clear();
  for (const auto& name : names) {
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      continue;
    }
    PlanOne(name, it->second);
    if (!it->second.in_flight && !it->second.actual && !desired_.contains(name)) {
      entries_.erase(it);
      ++generation_;
    }
  }
}

void Reconciler::PlanOne(const std::string& name, Entry& entry) {
  if (entry.in_flight) {
    return;
  }
  auto desired = desired_.find(name);
  const VolumeSpec* spec = desired == desired_.end() ? nullptr : &desired->second;
  const ActualVolume* actual = entry.actual ? &*entry.actual : nullptr;
  bool keep = !desired_complete_;
  if (spec == nullptr && actual != nullptr && manifest_errors_.contains(actual->manifest_file)) {
    keep = true;
  }
  const Plan plan = ComputePlan(spec, actual, keep);
  std::string blocked = plan.blocked;
  if (plan.op.kind == OpKind::kNone) {
    if (blocked.empty()) {
      entry.last_error.clear();
      entry.next_retry.reset();
    }
    if (entry.blocked != blocked) {
      entry.blocked = blocked;
      ++generation_;
    }
    return;
  }
  if (plan.op.kind == OpKind::kForget) {
    if (auto s = store_.Remove(*entry.actual); !s.ok()) {
      Log().warn("volume '{}': cannot remove its record: {}", name, s);
      return;
    }
    if (auto w = waiting_on_staging_.find(entry.actual->staging_path);
        w != waiting_on_staging_.end()) {
      MarkDirty(w->second);
      waiting_on_staging_.erase(w);
    }
    entry.actual.reset();
    ++generation_;
    return;
  }
  if (!(plan.op == entry.current_op)) {
    entry.current_op = plan.op;
    entry.schedule->Succeeded();
    entry.next_retry.reset();
  }
  if (!entry.schedule->Due()) {
    timers_.emplace(entry.schedule->next_attempt(), name);
    return;
  }
  const std::string& driver = spec != nullptr ? spec->driver : actual->driver;
  if (plan.op.kind == OpKind::kStage) {
    // The same volume under an old name that is still being torn down: let that finish first.
    const std::string staging =
        actual != nullptr
            ? actual->staging_path
            : StagingPathFor(options_.staging_root, spec->driver, spec->volume_handle);
    for (const auto& [other_name, other] : entries_) {
      if (other_name != name && other.actual && other.actual->staging_path == staging) {
        blocked = absl::StrCat("waiting for volume '", other_name,
                               "' (the same volume handle) to be torn down");
        waiting_on_staging_[staging] = name;
        if (entry.blocked != blocked) {
          entry.blocked = blocked;
          ++generation_;
        }
        return;  // Its removal wakes us (waiting_on_staging_).
      }
    }
  }
  auto client = drivers_.Find(driver);
  if (!client.ok()) {
    blocked = std::string(client.status().message());
    if (entry.blocked != blocked) {
      Log().info("volume '{}' waits: {}", name, blocked);
      entry.blocked = blocked;
      ++generation_;
    }
    return;  // A registry change pokes the loop.
  }
  entry.blocked.clear();
  entry.in_flight = true;
  entry.in_flight_op = plan.op;
  Task task;
  task.name = name;
  task.op = plan.op;
  task.actual = entry.actual;
  if (spec != nullptr) {
    task.spec = *spec;
    task.manifest_file = file_of_name_[name];
  }
  task.client = std::move(*client);
  tasks_.push_back(std::move(task));
  if (tasks_.size() > idle_workers_ && !stopping_ &&
      workers_.size() < static_cast<size_t>(std::max(1, options_.max_parallel))) {
    workers_.emplace_back([this](const std::stop_token& token) { Work(token); });
  }
  ++generation_;
  changed_cv_.notify_all();
  work_cv_.notify_one();
}

void Reconciler::VerifyMounts() {
  auto mounted = mounts_.MountPoints();
  if (!mounted.ok()) {
    Log().warn("reconciler: cannot read the mount table for the periodic check: {}",
               mounted.status());
    return;
  }
  for (auto& [name, entry] : entries_) {
    if (entry.in_flight || !entry.actual) {
      continue;
    }
    ActualVolume& a = *entry.actual;
    if (a.stage == StageState::kStaged && !a.capability.block &&
        !mounted->contains(a.staging_path)) {
      Log().warn("volume '{}': staging mount '{}' disappeared; staging again", name,
                 a.staging_path);
      a.stage = StageState::kUncertain;
      ++generation_;
    }
    // (The caller re-plans every volume after this check.)
    for (auto& t : a.targets) {
      if (t.state == PublishState::kPublished && !mounted->contains(t.target_path)) {
        Log().warn("volume '{}': mount at '{}' disappeared; publishing again", name, t.target_path);
        t.state = PublishState::kUncertain;
        ++generation_;
      }
    }
  }
}

void Reconciler::Work(const std::stop_token& token) {
  MutexLock lock(mu_);
  while (true) {
    ++idle_workers_;
    const bool got_task =
        work_cv_.wait_for(mu_, token, options_.worker_idle_timeout,
                          [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !tasks_.empty(); });
    --idle_workers_;
    if (token.stop_requested()) {
      return;
    }
    if (!got_task) {
      // Idle too long: leave. Detached, so that nobody has to join it; it touches nothing of
      // this reconciler once it has released mu_ on the way out (~Reconciler takes mu_ first).
      const auto self = std::find_if(workers_.begin(), workers_.end(), [](const std::jthread& w) {
        return w.get_id() == std::this_thread::get_id();
      });
      if (self != workers_.end()) {
        self->detach();
        workers_.erase(self);
        ++generation_;  // The status counts the workers.
        changed_cv_.notify_all();
      }
      return;
    }
    Task task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.Unlock();
    Result result = Execute(task);
    lock.Lock();
    Entry& entry = EntryFor(task.name);
    entry.in_flight = false;
    MarkDirty(task.name);
    if (!result.actual && task.actual) {
      if (auto w = waiting_on_staging_.find(task.actual->staging_path);
          w != waiting_on_staging_.end()) {
        MarkDirty(w->second);
        waiting_on_staging_.erase(w);
      }
    }
    entry.actual = std::move(result.actual);
    if (auto file = file_of_name_.find(task.name); file != file_of_name_.end()) {
      RecordManifestFile(task.name, entry, file->second);  // Renamed while it ran.
    }
    const std::string op = OpKindName(task.op.kind);
    const std::string where = task.op.target_path.empty() ? "" : " '" + task.op.target_path + "'";
    if (result.status.ok()) {
      entry.schedule->Succeeded();
      entry.last_error.clear();
      entry.next_retry.reset();
      Log().info("volume '{}': {}{} done", task.name, op, where);
    } else {
      if (options_.on_failure) {
        options_.on_failure(
            task.spec ? task.spec->driver : (task.actual ? task.actual->driver : ""), op);
      }
      const auto delay = entry.schedule->Failed();
      entry.next_retry = std::chrono::system_clock::now() + delay;
      const std::string error = absl::StrCat(op, where, ": ", result.status.ToString());
      if (error != entry.last_error) {
        Log().warn("volume '{}': {} failed: {}; retrying with backoff", task.name, op,
                   result.status);
      }
      entry.last_error = error;
    }
    Changed();
  }
}

}  // namespace stagehand::reconciler

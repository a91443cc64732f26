// The reconciler's status view: what `stagehandctl agent volumes`, the agent API, /readyz and the
// metrics show, and the long poll on its generation.

#include <algorithm>

#include "reconciler/reconciler.h"

namespace stagehand::reconciler {
namespace {

const char* StageName(StageState s) {
  switch (s) {
    case StageState::kNone:
      return "none";
    case StageState::kUncertain:
      return "uncertain";
    case StageState::kStaged:
      return "staged";
  }
  return "unknown";
}

}  // namespace

VolumeStatus Reconciler::StatusOf(const std::string& name, const Entry* entry) const {
  VolumeStatus v;
  v.name = name;
  auto desired = desired_.find(name);
  const VolumeSpec* spec = desired == desired_.end() ? nullptr : &desired->second;
  v.declared = spec != nullptr;
  const ActualVolume* a = entry != nullptr && entry->actual ? &*entry->actual : nullptr;
  if (spec != nullptr) {
    v.manifest_file = file_of_name_.at(name);
    v.driver = spec->driver;
    v.volume_handle = spec->volume_handle;
  } else if (a != nullptr) {
    v.manifest_file = a->manifest_file;
    v.driver = a->driver;
    v.volume_handle = a->volume_handle;
  }
  if (auto e = manifest_errors_.find(v.manifest_file); e != manifest_errors_.end()) {
    v.manifest_error = e->second;
  }
  v.stage_state = StageName(a != nullptr ? a->stage : StageState::kNone);
  v.staging_path = a != nullptr ? a->staging_path : "";
  std::set<std::string> listed;
  if (a != nullptr) {
    for (const auto& t : a->targets) {
      v.targets.push_back({t.target_path, t.read_only,
                           t.state == PublishState::kPublished ? "published" : "uncertain"});
      listed.insert(t.target_path);
    }
  }
  if (spec != nullptr) {
    for (const auto& t : spec->publish) {
      if (!listed.contains(t.target_path)) {
        v.targets.push_back({t.target_path, t.read_only, "pending"});
      }
    }
  }
  if (entry != nullptr) {
    v.in_flight = entry->in_flight ? OpKindName(entry->in_flight_op.kind) : "";
    v.blocked = entry->blocked;
    v.last_error = entry->last_error;
    v.condition = entry->condition;
    v.attempts = entry->schedule ? entry->schedule->failures() : 0;
    v.next_retry = entry->next_retry;
  }
  // One word for people.
  if (entry != nullptr && entry->in_flight) {
    switch (entry->in_flight_op.kind) {
      case OpKind::kStage:
        v.phase = VolumePhase::kStaging;
        break;
      case OpKind::kPublish:
        v.phase = VolumePhase::kPublishing;
        break;
      case OpKind::kUnpublish:
        v.phase = VolumePhase::kUnpublishing;
        break;
      case OpKind::kUnstage:
        v.phase = VolumePhase::kUnstaging;
        break;
      case OpKind::kForget:
      case OpKind::kNone:
        v.phase = VolumePhase::kForgetting;
        break;
    }
  } else if (!v.last_error.empty()) {
    v.phase = VolumePhase::kError;
  } else if (!v.blocked.empty()) {
    v.phase = VolumePhase::kWaiting;
  } else if (a == nullptr) {
    v.phase = VolumePhase::kPending;
  } else if (a->stage == StageState::kUncertain) {
    v.phase = VolumePhase::kUncertain;
  } else {
    bool all = !v.targets.empty();
    for (const auto& t : v.targets) {
      all = all && t.state == "published";
    }
    v.phase =
        all ? VolumePhase::kPublished
            : (a->stage == StageState::kStaged ? VolumePhase::kStaged : VolumePhase::kPending);
  }
  return v;
}

ReconcilerStatus Reconciler::Status() const {
  MutexLock lock(mu_);
  ReconcilerStatus status;
  status.generation = generation_;
  status.ready = ready_;
  status.store_errors = store_errors_;
  status.workers = workers_.size();
  std::set<std::string> names;
  for (const auto& [name, entry] : entries_) {
    names.insert(name);
  }
  for (const auto& [name, spec] : desired_) {
    names.insert(name);
  }
  for (const auto& name : names) {
    auto it = entries_.find(name);
    status.volumes.push_back(StatusOf(name, it == entries_.end() ? nullptr : &it->second));
  }
  for (const auto& [file, error] : manifest_errors_) {
    if (!name_of_file_.contains(file)) {
      status.manifest_errors[file] = error;
    }
  }
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

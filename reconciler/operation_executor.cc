// The reconciler's operations: one stage, publish, unpublish or unstage call through the volume's
// driver, and what its outcome does to the actual state.

#include <absl/strings/str_cat.h>

#include "reconciler/reconciler.h"

namespace stagehand::reconciler {
namespace {

ActualVolume NewActual(const VolumeSpec& spec, const std::string& file, const std::string& root) {
  ActualVolume a;
  a.name = spec.name;
  a.manifest_file = file;
  a.driver = spec.driver;
  a.volume_handle = spec.volume_handle;
  a.capability = spec.capability;
  a.volume_context = spec.volume_context;
  a.staging_path = StagingPathFor(root, spec.driver, spec.volume_handle);
  return a;
}

// NotFound from an unpublish or unstage: the driver does not know the volume, so nothing of it
// is left on this node.
bool Gone(const absl::Status& s) {
  return s.ok() || absl::IsNotFound(s);
}

}  // namespace

Reconciler::Result Reconciler::Execute(Task& task) {
  switch (task.op.kind) {
    case OpKind::kStage:
      return Stage(task);
    case OpKind::kPublish:
      return Publish(task);
    case OpKind::kUnpublish:
      return Unpublish(task);
    case OpKind::kUnstage:
      return Unstage(task);
    default:
      return {task.actual, absl::InternalError("nothing to execute")};
  }
}

Reconciler::Result Reconciler::Stage(Task& task) {
  const VolumeSpec& spec = *task.spec;
  ActualVolume a =
      task.actual ? *task.actual : NewActual(spec, task.manifest_file, options_.staging_root);
  a.manifest_file = task.manifest_file;
  const StageState prior = a.stage;
  a.stage = StageState::kUncertain;
  if (auto s = store_.Save(a); !s.ok()) {
    return {task.actual, WithContext(s, "recording the stage before calling the driver")};
  }
  StageCall call;
  call.volume_handle = spec.volume_handle;
  call.staging_path = a.staging_path;
  call.capability = spec.capability;
  call.volume_context = spec.volume_context;
  call.publish_context = spec.publish_context;
  call.secrets_file = spec.secrets_file;
  ++node_calls_;
  const absl::Status s = task.client->Stage(call, options_.call_timeout);
  if (s.ok()) {
    a.stage = StageState::kStaged;
  } else if (!IsUncertainCode(s.code())) {
    a.stage = prior == StageState::kStaged ? StageState::kUncertain : prior;
  }
  if (a.stage == StageState::kNone && a.targets.empty()) {
    // A definite failure of a first stage: nothing exists, nothing to remember.
    if (auto removed = store_.Remove(a); !removed.ok()) {
      return {a, s.ok() ? removed : s};
    }
    return {std::nullopt, s};
  }
  if (auto saved = store_.Save(a); !saved.ok()) {
    // Keep the durable "uncertain": the next attempt repeats the (idempotent) stage.
    a.stage = StageState::kUncertain;
    return {a, s.ok() ? saved : s};
  }
  return {a, s};
}

Reconciler::Result Reconciler::Publish(Task& task) {
  const VolumeSpec& spec = *task.spec;
  ActualVolume a = *task.actual;
  ActualTarget* t = a.FindTarget(task.op.target_path);
  const bool existed = t != nullptr;
  if (!existed) {
    a.targets.push_back({task.op.target_path, task.op.read_only, PublishState::kUncertain});
  } else {
    t->state = PublishState::kUncertain;
  }
  if (auto s = store_.Save(a); !s.ok()) {
    return {task.actual, WithContext(s, "recording the publish before calling the driver")};
  }
  PublishCall call;
  call.volume_handle = spec.volume_handle;
  call.staging_path = a.staging_path;
  call.target_path = task.op.target_path;
  call.read_only = task.op.read_only;
  call.capability = spec.capability;
  call.volume_context = spec.volume_context;
  call.publish_context = spec.publish_context;
  ++node_calls_;
  const absl::Status s = task.client->Publish(call, options_.call_timeout);
  t = a.FindTarget(task.op.target_path);
  if (s.ok()) {
    t->state = PublishState::kPublished;
  } else if (!IsUncertainCode(s.code()) && !existed) {
    std::erase_if(a.targets,
                  [&](const ActualTarget& x) { return x.target_path == task.op.target_path; });
  }
  if (auto saved = store_.Save(a); !saved.ok()) {
    if (ActualTarget* u = a.FindTarget(task.op.target_path)) {
      u->state = PublishState::kUncertain;
    }
    return {a, s.ok() ? saved : s};
  }
  return {a, s};
}

Reconciler::Result Reconciler::Unpublish(Task& task) {
  ActualVolume a = *task.actual;
  ActualTarget* t = a.FindTarget(task.op.target_path);
  if (t == nullptr) {
    return {a, absl::OkStatus()};
  }
  t->state = PublishState::kUncertain;
  if (auto s = store_.Save(a); !s.ok()) {
    return {task.actual, WithContext(s, "recording the unpublish before calling the driver")};
  }
  ++node_calls_;
  const absl::Status s =
      task.client->Unpublish(a.volume_handle, task.op.target_path, options_.call_timeout);
  if (!Gone(s)) {
    return {a, s};
  }
  std::erase_if(a.targets,
                [&](const ActualTarget& x) { return x.target_path == task.op.target_path; });
  if (auto saved = store_.Save(a); !saved.ok()) {
    // Unmounted but not recorded: keep the target as uncertain, so it is unpublished again.
    ActualVolume kept = *task.actual;
    if (ActualTarget* lost = kept.FindTarget(task.op.target_path)) {
      lost->state = PublishState::kUncertain;
    }
    return {kept, saved};
  }
  return {a, absl::OkStatus()};
}

Reconciler::Result Reconciler::Unstage(Task& task) {
  ActualVolume a = *task.actual;
  a.stage = StageState::kUncertain;
  if (auto s = store_.Save(a); !s.ok()) {
    return {task.actual, WithContext(s, "recording the unstage before calling the driver")};
  }
  ++node_calls_;
  const absl::Status s =
      task.client->Unstage(a.volume_handle, a.staging_path, options_.call_timeout);
  if (!Gone(s)) {
    return {a, s};
  }
  if (auto removed = store_.Remove(a); !removed.ok()) {
    return {a, removed};
  }
  return {std::nullopt, absl::OkStatus()};
}

}  // namespace stagehand::reconciler

#include "reconciler/operation_executor.h"

#include <algorithm>

#include <absl/strings/str_cat.h>

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

// The record an operation starts from: the current one, naming the file that declares the
// volume now (a renamed manifest).
ActualVolume Current(const Operation& operation) {
  ActualVolume a = *operation.actual;
  if (!operation.manifest_file.empty()) {
    a.manifest_file = operation.manifest_file;
  }
  return a;
}

// NotFound from an unpublish or unstage: the driver does not know the volume, so nothing of it
// is left on this node.
bool Gone(const absl::Status& s) {
  return s.ok() || absl::IsNotFound(s);
}

}  // namespace

OperationExecutor::OperationExecutor(Options options, DriverDirectory& drivers, ActualStore& store,
                                     Listener& listener)
    : options_(std::move(options)), drivers_(drivers), store_(store), listener_(listener) {}

OperationExecutor::~OperationExecutor() {
  Stop();
}

void OperationExecutor::Submit(std::vector<Operation> operations) {
  std::vector<std::jthread> finished;
  {
    MutexLock lock(mu_);
    finished.swap(finished_);
    if (stopping_) {
      return;
    }
    for (auto& operation : operations) {
      queue_.push_back(std::move(operation));
    }
    // Busy workers take nothing from the queue: one more per operation that no idle (or
    // starting) worker will take, up to max_parallel.
    const size_t most = static_cast<size_t>(std::max(1, options_.max_parallel));
    while (queue_.size() > idle_ + starting_ && workers_.size() < most) {
      ++starting_;
      workers_.emplace_back([this](const std::stop_token& token) { Work(token); });
    }
    cv_.notify_all();
  }
  finished.clear();  // Joins workers that left; they are on their way out.
}

void OperationExecutor::Stop() {
  std::vector<std::jthread> workers;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    queue_.clear();
    for (auto& w : workers_) {
      w.request_stop();
    }
    workers.swap(workers_);
    for (auto& w : finished_) {
      workers.push_back(std::move(w));
    }
    finished_.clear();
    cv_.notify_all();
  }
  workers.clear();  // Joins; a running CSI call finishes (bounded by the call timeout).
}

size_t OperationExecutor::workers() const {
  MutexLock lock(mu_);
  return workers_.size();
}

void OperationExecutor::Work(const std::stop_token& token) {
  bool started = false;
  while (true) {
    std::optional<Operation> operation;
    {
      MutexLock lock(mu_);
      if (!started) {
        started = true;
        --starting_;
      }
      ++idle_;
      const bool got =
          cv_.wait_for(mu_, token, options_.worker_idle_timeout,
                       [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty(); });
      --idle_;
      if (token.stop_requested() || stopping_) {
        return;
      }
      if (!got) {
        // Idle too long: leave, to be joined by the next Submit or Stop.
        auto self = std::find_if(workers_.begin(), workers_.end(), [](const std::jthread& w) {
          return w.get_id() == std::this_thread::get_id();
        });
        if (self == workers_.end()) {
          return;
        }
        finished_.push_back(std::move(*self));
        workers_.erase(self);
      } else {
        operation = std::move(queue_.front());
        queue_.pop_front();
      }
    }
    if (!operation) {
      listener_.WorkersChanged();
      return;
    }
    OperationResult result = Execute(*operation);
    listener_.OperationDone(*operation, std::move(result));
  }
}

OperationResult OperationExecutor::Execute(const Operation& operation) {
  switch (operation.op.kind) {
    case OpKind::kRecordFile:
      return RecordFile(operation);
    case OpKind::kForget:
      return Forget(operation);
    case OpKind::kStage:
    case OpKind::kPublish:
    case OpKind::kUnpublish:
    case OpKind::kUnstage:
      break;
    case OpKind::kNone:
      return {operation.actual, absl::InternalError("nothing to execute")};
  }
  auto client = drivers_.Find(operation.driver);
  if (!client.ok()) {
    return {operation.actual, client.status(), /*blocked=*/true};
  }
  ++node_calls_;
  switch (operation.op.kind) {
    case OpKind::kStage:
      return Stage(operation, **client);
    case OpKind::kPublish:
      return Publish(operation, **client);
    case OpKind::kUnpublish:
      return Unpublish(operation, **client);
    default:
      return Unstage(operation, **client);
  }
}

OperationResult OperationExecutor::Stage(const Operation& operation, NodeClient& client) {
  const VolumeSpec& spec = *operation.spec;
  ActualVolume a = operation.actual
                       ? Current(operation)
                       : NewActual(spec, operation.manifest_file, options_.staging_root);
  const StageState prior = a.stage;
  a.stage = StageState::kUncertain;
  if (auto s = store_.Save(a); !s.ok()) {
    return {operation.actual, WithContext(s, "recording the stage before calling the driver")};
  }
  StageCall call;
  call.volume_handle = spec.volume_handle;
  call.staging_path = a.staging_path;
  call.capability = spec.capability;
  call.volume_context = spec.volume_context;
  call.publish_context = spec.publish_context;
  call.secrets_file = spec.secrets_file;
  const absl::Status s = client.Stage(call, options_.call_timeout);
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

OperationResult OperationExecutor::Publish(const Operation& operation, NodeClient& client) {
  const VolumeSpec& spec = *operation.spec;
  const std::string& path = operation.op.target_path;
  ActualVolume a = Current(operation);
  ActualTarget* t = a.FindTarget(path);
  const bool existed = t != nullptr;
  if (!existed) {
    a.targets.push_back({path, operation.op.read_only, PublishState::kUncertain});
  } else {
    t->state = PublishState::kUncertain;
  }
  if (auto s = store_.Save(a); !s.ok()) {
    return {operation.actual, WithContext(s, "recording the publish before calling the driver")};
  }
  PublishCall call;
  call.volume_handle = spec.volume_handle;
  call.staging_path = a.staging_path;
  call.target_path = path;
  call.read_only = operation.op.read_only;
  call.capability = spec.capability;
  call.volume_context = spec.volume_context;
  call.publish_context = spec.publish_context;
  const absl::Status s = client.Publish(call, options_.call_timeout);
  t = a.FindTarget(path);
  if (s.ok()) {
    t->state = PublishState::kPublished;
  } else if (!IsUncertainCode(s.code()) && !existed) {
    std::erase_if(a.targets, [&](const ActualTarget& x) { return x.target_path == path; });
  }
  if (auto saved = store_.Save(a); !saved.ok()) {
    if (ActualTarget* u = a.FindTarget(path)) {
      u->state = PublishState::kUncertain;
    }
    return {a, s.ok() ? saved : s};
  }
  return {a, s};
}

OperationResult OperationExecutor::Unpublish(const Operation& operation, NodeClient& client) {
  const std::string& path = operation.op.target_path;
  ActualVolume a = Current(operation);
  ActualTarget* t = a.FindTarget(path);
  if (t == nullptr) {
    return {operation.actual, absl::OkStatus()};
  }
  t->state = PublishState::kUncertain;
  if (auto s = store_.Save(a); !s.ok()) {
    return {operation.actual, WithContext(s, "recording the unpublish before calling the driver")};
  }
  const absl::Status s = client.Unpublish(a.volume_handle, path, options_.call_timeout);
  if (!Gone(s)) {
    return {a, s};
  }
  std::erase_if(a.targets, [&](const ActualTarget& x) { return x.target_path == path; });
  if (auto saved = store_.Save(a); !saved.ok()) {
    // Unmounted but not recorded: keep the target as uncertain, so it is unpublished again.
    ActualVolume kept = *operation.actual;
    if (ActualTarget* lost = kept.FindTarget(path)) {
      lost->state = PublishState::kUncertain;
    }
    return {kept, saved};
  }
  return {a, absl::OkStatus()};
}

OperationResult OperationExecutor::Unstage(const Operation& operation, NodeClient& client) {
  ActualVolume a = Current(operation);
  a.stage = StageState::kUncertain;
  if (auto s = store_.Save(a); !s.ok()) {
    return {operation.actual, WithContext(s, "recording the unstage before calling the driver")};
  }
  const absl::Status s = client.Unstage(a.volume_handle, a.staging_path, options_.call_timeout);
  if (!Gone(s)) {
    return {a, s};
  }
  if (auto removed = store_.Remove(a); !removed.ok()) {
    return {a, removed};
  }
  return {std::nullopt, absl::OkStatus()};
}

OperationResult OperationExecutor::RecordFile(const Operation& operation) {
  ActualVolume a = Current(operation);
  if (auto s = store_.Save(a); !s.ok()) {
    return {operation.actual, WithContext(s, "recording the volume's new manifest file")};
  }
  return {a, absl::OkStatus()};
}

OperationResult OperationExecutor::Forget(const Operation& operation) {
  if (auto s = store_.Remove(*operation.actual); !s.ok()) {
    return {operation.actual, WithContext(s, "removing the record of a volume that holds nothing")};
  }
  return {std::nullopt, absl::OkStatus()};
}

}  // namespace stagehand::reconciler

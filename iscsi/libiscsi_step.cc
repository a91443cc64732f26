#include "iscsi/libiscsi_step.h"

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>

#include <absl/strings/str_cat.h>

#include "iscsi/iscsi_errors.h"

namespace stagehand::iscsi {

void FinishAsyncStep(iscsi_context* ctx, int status, AsyncStep* step) {
  step->done = true;
  step->status = status;
  if (status != SCSI_STATUS_GOOD) {
    const char* error = iscsi_get_error(ctx);
    step->error = error != nullptr ? error : "";
  }
}

void OnAsyncStep(iscsi_context* ctx, int status, void*, void* private_data) {
  FinishAsyncStep(ctx, status, static_cast<AsyncStep*>(private_data));
}

namespace {

// Services `ctx` until `step` is done or the deadline; errors for the deadline and for a
// connection that fails.
absl::Status ServiceUntilDone(iscsi_context* ctx, const std::string& what, int timeout_seconds,
                              const AsyncStep& step, const Keepalive& keepalive) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  while (!step.done) {
    if (keepalive) {
      keepalive();
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return absl::UnavailableError(
          absl::StrCat(what, ": no answer within ", timeout_seconds, " s"));
    }
    pollfd pfd{iscsi_get_fd(ctx), static_cast<short>(iscsi_which_events(ctx)), 0};
    const int n = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 100)));
    if (n < 0 && errno != EINTR) {
      return ErrnoStatus(errno, absl::StrCat(what, ": poll"));
    }
    if (iscsi_service(ctx, n > 0 ? pfd.revents : 0) < 0) {
      return MapLibiscsiError(what, step.error.empty() ? iscsi_get_error(ctx) : step.error);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunAsyncStep(iscsi_context* ctx, const std::string& what, int timeout_seconds,
                          AsyncStep& step, int start, const Keepalive& keepalive) {
  if (start != 0) {
    return MapLibiscsiError(what, iscsi_get_error(ctx));
  }
  SH_RETURN_IF_ERROR(ServiceUntilDone(ctx, what, timeout_seconds, step, keepalive));
  if (step.status != SCSI_STATUS_GOOD) {
    return MapLibiscsiError(what, step.error.empty() ? iscsi_get_error(ctx) : step.error);
  }
  return absl::OkStatus();
}

void OnTaskStep(iscsi_context* ctx, int status, void* command_data, void* private_data) {
  auto* step = static_cast<TaskStep*>(private_data);
  step->task = static_cast<scsi_task*>(command_data);
  FinishAsyncStep(ctx, status, step);
}

absl::StatusOr<ScsiTask> RunTaskStep(iscsi_context* ctx, const std::string& what,
                                     int timeout_seconds, TaskStep& step, scsi_task* started,
                                     const Keepalive& keepalive) {
  if (started == nullptr) {
    return MapLibiscsiError(what, iscsi_get_error(ctx));
  }
  const absl::Status serviced = ServiceUntilDone(ctx, what, timeout_seconds, step, keepalive);
  ScsiTask task(step.done ? step.task : nullptr);
  if (!serviced.ok()) {
    // Not done: the task is still libiscsi's (it frees it with the context).
    return absl::UnavailableError(serviced.message());
  }
  if (!task) {
    return absl::UnavailableError(absl::StrCat(what, ": no answer"));
  }
  return task;
}

}  // namespace stagehand::iscsi

#pragma once

// One asynchronous libiscsi call driven to completion on the calling thread, under a deadline of
// ours: libiscsi's *_sync calls have none, and a half-started target must not hang the caller.
// For code that talks libiscsi directly (iscsi/*.cc, stagehandctl).

#include <functional>
#include <string>

#include "base/status.h"
#include "iscsi/iscsi_handles.h"

struct iscsi_context;

namespace stagehand::iscsi {

// What the call's callback reported.
struct AsyncStep {
  bool done = false;
  int status = 0;
  // iscsi_get_error() when the callback reported a failure: libiscsi overwrites its error text
  // when iscsi_service() then fails as well, so the first, more specific one is kept here.
  std::string error;
};

// Marks `step` done with `status` (and the error text on failure). For callbacks that collect
// more (command_data) before or after.
void FinishAsyncStep(iscsi_context* ctx, int status, AsyncStep* step);

// A libiscsi command callback whose private_data is an AsyncStep*.
void OnAsyncStep(iscsi_context* ctx, int status, void* command_data, void* private_data);

// Called at least every 100 ms while a step waits (a watchdog ping); may be empty.
using Keepalive = std::function<void()>;

// Services `ctx` until `step` is done or `timeout_seconds` pass. `start` is what the *_async
// call returned. Unavailable on the deadline; otherwise errors as MapLibiscsiError maps them,
// prefixed with `what`.
absl::Status RunAsyncStep(iscsi_context* ctx, const std::string& what, int timeout_seconds,
                          AsyncStep& step, int start, const Keepalive& keepalive = {});

// A step whose callback hands over a SCSI task (command_data), to look at even when the command
// did not complete with GOOD (sense data).
struct TaskStep : AsyncStep {
  scsi_task* task = nullptr;  // Owned by whoever takes it from here.
};

// A libiscsi task callback whose private_data is a TaskStep*.
void OnTaskStep(iscsi_context* ctx, int status, void* command_data, void* private_data);

// Runs a *_task call (`started`: its return value, non-null when queued) to completion under
// the deadline, and returns the task whatever its SCSI status. Unavailable on the deadline or
// when the connection fails.
absl::StatusOr<ScsiTask> RunTaskStep(iscsi_context* ctx, const std::string& what,
                                     int timeout_seconds, TaskStep& step, scsi_task* started,
                                     const Keepalive& keepalive = {});

}  // namespace stagehand::iscsi

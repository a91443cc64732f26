#pragma once

// One asynchronous libiscsi call driven to completion on the calling thread, under a deadline of
// ours: libiscsi's *_sync calls have none, and a half-started target must not hang the caller.
// For code that talks libiscsi directly (iscsi/*.cc, stagehandctl).

#include <string>

#include "base/status.h"

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

// Services `ctx` until `step` is done or `timeout_seconds` pass. `start` is what the *_async
// call returned. Unavailable on the deadline; otherwise errors as MapLibiscsiError maps them,
// prefixed with `what`.
absl::Status RunAsyncStep(iscsi_context* ctx, const std::string& what, int timeout_seconds,
                          AsyncStep& step, int start);

}  // namespace stagehand::iscsi

#pragma once

// The reconciler's bookkeeping of one volume's operations (the kubelet keeps the same in its
// pending operations): what runs now, the backoff of the operation that keeps failing, and why
// the volume waits.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "base/backoff.h"
#include "reconciler/plan.h"

namespace stagehand::reconciler {

struct OperationState {
  bool in_flight = false;
  Op in_flight_op;
  Op current_op;  // The operation the backoff belongs to.
  std::unique_ptr<RetrySchedule> schedule;
  std::string last_error;
  std::string blocked;
  std::string condition;  // What the driver last said of its health (ReportCondition).
  std::optional<std::chrono::system_clock::time_point> next_retry;
  // Something asked for a new plan while an operation ran (see Reconciler::OperationDone).
  bool replan = false;
  bool record_failed = false;  // The last kRecordFile failed (it waits for the backoff).
  uint64_t completions = 0;    // Operations finished so far (the periodic mount check's guard).
};

}  // namespace stagehand::reconciler

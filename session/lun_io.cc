#include "session/lun_io.h"

#include <algorithm>
#include <cerrno>

#include "iscsi/lun_identity.h"

namespace stagehand::session {

MappedIo MapRead(int64_t offset, size_t size, uint64_t capacity_bytes, uint32_t block_size) {
  if (offset < 0 || block_size == 0) {
    return {.error = EINVAL};
  }
  const auto start = static_cast<uint64_t>(offset);
  if (start >= capacity_bytes || size == 0) {
    return {};
  }
  const uint64_t end = std::min<uint64_t>(start + size, capacity_bytes);
  const uint64_t first = start / block_size;
  const uint64_t last = (end + block_size - 1) / block_size;  // Exclusive.
  return {.lba = first,
          .blocks = last - first,
          .slice_offset = static_cast<size_t>(start - first * block_size),
          .slice_length = static_cast<size_t>(end - start)};
}

MappedIo MapWrite(int64_t offset, size_t size, uint64_t capacity_bytes, uint32_t block_size) {
  if (offset < 0 || block_size == 0) {
    return {.error = EINVAL};
  }
  const auto start = static_cast<uint64_t>(offset);
  if (start % block_size != 0 || size % block_size != 0) {
    return {.error = EINVAL};
  }
  if (size == 0) {
    return {};
  }
  if (start >= capacity_bytes) {
    return {.error = ENOSPC};
  }
  const uint64_t len = std::min<uint64_t>(size, capacity_bytes - start);
  return {.lba = start / block_size,
          .blocks = len / block_size,
          .slice_length = static_cast<size_t>(len)};
}

bool IsUnitAttention(const scsi_task& task) {
  return task.status == SCSI_STATUS_CHECK_CONDITION && task.sense.key == SCSI_SENSE_UNIT_ATTENTION;
}

CompletionAction ClassifyCompletion(int status, const scsi_task* task, int retries) {
  if (status == SCSI_STATUS_RESERVATION_CONFLICT) {
    return CompletionAction::kFenced;
  }
  if (retries + 1 >= kMaxRetriesPerRequest) {
    return CompletionAction::kFail;
  }
  if (task != nullptr && IsUnitAttention(*task) &&
      iscsi::UnitAttentionMayChangeTheLun(task->sense.ascq)) {
    return CompletionAction::kRecheckIdentity;
  }
  if (status == SCSI_STATUS_CANCELLED || status == SCSI_STATUS_TIMEOUT ||
      status == SCSI_STATUS_ERROR) {
    return CompletionAction::kReconnect;
  }
  if (task != nullptr && IsUnitAttention(*task)) {
    return CompletionAction::kRetryNow;
  }
  const bool passing = status == SCSI_STATUS_BUSY || status == SCSI_STATUS_TASK_SET_FULL ||
                       status == SCSI_STATUS_TASK_ABORTED ||
                       (task != nullptr && task->status == SCSI_STATUS_CHECK_CONDITION &&
                        task->sense.key == SCSI_SENSE_NOT_READY);
  return passing ? CompletionAction::kRetryOnTick : CompletionAction::kFail;
}

}  // namespace stagehand::session

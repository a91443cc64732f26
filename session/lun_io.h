#pragma once

// The pure decisions of the userspace data path: which blocks a FUSE read or write covers, and
// what to do with a SCSI command that did not complete with GOOD.

#include <cstddef>
#include <cstdint>

#include "iscsi/iscsi_handles.h"

namespace stagehand::session {

// A FUSE read or write mapped onto the LUN's logical blocks.
struct MappedIo {
  int error = 0;  // Non-zero: answer with this errno and transfer nothing.
  // error == 0 and blocks == 0: answer at once with zero bytes.
  uint64_t lba = 0;
  uint64_t blocks = 0;
  size_t slice_offset = 0;  // Reads: where the requested bytes start in the blocks read.
  size_t slice_length = 0;  // Bytes read or written (clamped at the end of the LUN).

  friend bool operator==(const MappedIo&, const MappedIo&) = default;
};

// A read of `size` bytes at `offset`: the whole blocks covering it, clamped at the end of the
// LUN (a read past the end reads nothing). EINVAL for a negative offset.
MappedIo MapRead(int64_t offset, size_t size, uint64_t capacity_bytes, uint32_t block_size);

// A write of `size` bytes at `offset`. The loop device sends whole logical blocks (its block
// size is the LUN's); a partial-block write would need a read-modify-write, so it is refused
// with EINVAL rather than rounded. Short at the end of the LUN; ENOSPC wholly past it.
MappedIo MapWrite(int64_t offset, size_t size, uint64_t capacity_bytes, uint32_t block_size);

inline constexpr int kMaxRetriesPerRequest = 1000;

// What to do with a command that completed with `status` (not SCSI_STATUS_GOOD) after
// `retries` earlier retries. `task` may be null (libiscsi gives none on some failures).
enum class CompletionAction {
  // The LUN may have been reset, remapped or replaced: park the request and log in again, which
  // re-reads the identity before anything more is sent (and fails closed on another LUN).
  kRecheckIdentity,
  // Connection trouble: park the request and log in again.
  kReconnect,
  // A unit attention that does not change the LUN: it is reported once, retry right away.
  kRetryNow,
  // A target-side condition that passes (busy, task set full, aborted, not ready while the LUN
  // comes back): retry on the next tick.
  kRetryOnTick,
  // Nothing to retry, or retried too often: EIO.
  kFail,
  // RESERVATION CONFLICT: another node holds the LUN's reservation and this one is not
  // registered (preempted, or never was): EIO, and so is every I/O from now on. Never retried,
  // never registered again on its own.
  kFenced,
};

CompletionAction ClassifyCompletion(int status, const scsi_task* task, int retries);

// CHECK CONDITION with sense key UNIT ATTENTION.
bool IsUnitAttention(const scsi_task& task);

}  // namespace stagehand::session

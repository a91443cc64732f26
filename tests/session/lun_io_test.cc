#include "session/lun_io.h"

#include <cerrno>
#include <optional>

#include <gtest/gtest.h>

namespace stagehand::session {
namespace {

constexpr uint64_t kCapacity = uint64_t{8} * 4096;  // Eight 4 KiB blocks.
constexpr uint32_t kBlock = 4096;

TEST(MapReadTest, CoversWholeBlocksAndSlicesTheRequestedBytes) {
  EXPECT_EQ(MapRead(0, 4096, kCapacity, kBlock),
            (MappedIo{.lba = 0, .blocks = 1, .slice_length = 4096}));
  // 100 bytes across the boundary of blocks 1 and 2.
  EXPECT_EQ(MapRead(8192 - 50, 100, kCapacity, kBlock),
            (MappedIo{.lba = 1, .blocks = 2, .slice_offset = 4096 - 50, .slice_length = 100}));
}

TEST(MapReadTest, ClampsAtTheEndOfTheLun) {
  EXPECT_EQ(MapRead(kCapacity - 4096, size_t{3} * 4096, kCapacity, kBlock),
            (MappedIo{.lba = 7, .blocks = 1, .slice_length = 4096}));
}

TEST(MapReadTest, ReadsNothingPastTheEndOrForZeroBytes) {
  EXPECT_EQ(MapRead(kCapacity, 4096, kCapacity, kBlock), MappedIo{});
  EXPECT_EQ(MapRead(kCapacity + 4096, 4096, kCapacity, kBlock), MappedIo{});
  EXPECT_EQ(MapRead(0, 0, kCapacity, kBlock), MappedIo{});
}

TEST(MapReadTest, RefusesANegativeOffset) {
  EXPECT_EQ(MapRead(-1, 4096, kCapacity, kBlock).error, EINVAL);
}

TEST(MapWriteTest, WritesWholeBlocks) {
  EXPECT_EQ(MapWrite(4096, size_t{2} * 4096, kCapacity, kBlock),
            (MappedIo{.lba = 1, .blocks = 2, .slice_length = size_t{2} * 4096}));
}

TEST(MapWriteTest, RefusesPartialBlocksRatherThanRounding) {
  EXPECT_EQ(MapWrite(512, 4096, kCapacity, kBlock).error, EINVAL);
  EXPECT_EQ(MapWrite(0, 4096 + 512, kCapacity, kBlock).error, EINVAL);
  EXPECT_EQ(MapWrite(-4096, 4096, kCapacity, kBlock).error, EINVAL);
}

TEST(MapWriteTest, IsShortAtTheEndAndRefusedPastIt) {
  EXPECT_EQ(MapWrite(kCapacity - 4096, size_t{2} * 4096, kCapacity, kBlock),
            (MappedIo{.lba = 7, .blocks = 1, .slice_length = 4096}));
  EXPECT_EQ(MapWrite(kCapacity, 4096, kCapacity, kBlock).error, ENOSPC);
}

TEST(MapWriteTest, AnEmptyWriteWritesNothing) {
  EXPECT_EQ(MapWrite(0, 0, kCapacity, kBlock), MappedIo{});
  EXPECT_EQ(MapWrite(kCapacity, 0, kCapacity, kBlock), MappedIo{});
}

scsi_task CheckCondition(scsi_sense_key key, int asc_ascq) {
  scsi_task task{};
  task.status = SCSI_STATUS_CHECK_CONDITION;
  task.sense.key = key;
  task.sense.ascq = asc_ascq;
  return task;
}

struct ClassifyCase {
  const char* name;
  int status;
  std::optional<scsi_task> task;
  CompletionAction want;
};

TEST(ClassifyCompletionTest, Table) {
  const ClassifyCase cases[] = {
      {"cancelled", SCSI_STATUS_CANCELLED, std::nullopt, CompletionAction::kReconnect},
      {"timeout", SCSI_STATUS_TIMEOUT, std::nullopt, CompletionAction::kReconnect},
      {"error", SCSI_STATUS_ERROR, std::nullopt, CompletionAction::kReconnect},
      {"busy", SCSI_STATUS_BUSY, std::nullopt, CompletionAction::kRetryOnTick},
      {"task set full", SCSI_STATUS_TASK_SET_FULL, std::nullopt, CompletionAction::kRetryOnTick},
      {"aborted", SCSI_STATUS_TASK_ABORTED, std::nullopt, CompletionAction::kRetryOnTick},
      {"not ready", SCSI_STATUS_CHECK_CONDITION, CheckCondition(SCSI_SENSE_NOT_READY, 0x0401),
       CompletionAction::kRetryOnTick},
      // Power on / reset: retried at once (reported once).
      {"reset", SCSI_STATUS_CHECK_CONDITION, CheckCondition(SCSI_SENSE_UNIT_ATTENTION, 0x2900),
       CompletionAction::kRecheckIdentity},
      // Reported LUNs changed, and capacity changed: the LUN may be another one.
      {"luns changed", SCSI_STATUS_CHECK_CONDITION,
       CheckCondition(SCSI_SENSE_UNIT_ATTENTION, 0x3f0e), CompletionAction::kRecheckIdentity},
      {"capacity changed", SCSI_STATUS_CHECK_CONDITION,
       CheckCondition(SCSI_SENSE_UNIT_ATTENTION, 0x2a09), CompletionAction::kRecheckIdentity},
      // Mode parameters changed: the same LUN, retried at once.
      {"mode parameters changed", SCSI_STATUS_CHECK_CONDITION,
       CheckCondition(SCSI_SENSE_UNIT_ATTENTION, 0x2a01), CompletionAction::kRetryNow},
      // A medium error is not retried.
      {"medium error", SCSI_STATUS_CHECK_CONDITION, CheckCondition(SCSI_SENSE_MEDIUM_ERROR, 0x1100),
       CompletionAction::kFail},
      // Another node holds the reservation: fenced, never retried.
      {"reservation conflict", SCSI_STATUS_RESERVATION_CONFLICT, std::nullopt,
       CompletionAction::kFenced},
  };
  for (const ClassifyCase& c : cases) {
    const scsi_task* task = c.task ? &*c.task : nullptr;
    EXPECT_EQ(ClassifyCompletion(c.status, task, 0), c.want) << c.name;
  }
}

TEST(ClassifyCompletionTest, GivesUpAfterTheLastRetry) {
  EXPECT_EQ(ClassifyCompletion(SCSI_STATUS_CANCELLED, nullptr, kMaxRetriesPerRequest - 2),
            CompletionAction::kReconnect);
  EXPECT_EQ(ClassifyCompletion(SCSI_STATUS_CANCELLED, nullptr, kMaxRetriesPerRequest - 1),
            CompletionAction::kFail);
  const scsi_task reset = CheckCondition(SCSI_SENSE_UNIT_ATTENTION, 0x2900);
  EXPECT_EQ(ClassifyCompletion(SCSI_STATUS_CHECK_CONDITION, &reset, kMaxRetriesPerRequest - 1),
            CompletionAction::kFail);
  EXPECT_EQ(
      ClassifyCompletion(SCSI_STATUS_RESERVATION_CONFLICT, nullptr, kMaxRetriesPerRequest - 1),
      CompletionAction::kFenced);
}

}  // namespace
}  // namespace stagehand::session

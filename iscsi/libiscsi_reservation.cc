// iscsi::Connection's persistent-reservation commands (SPC-4 PERSISTENT RESERVE IN and OUT).

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#include <algorithm>

#include <absl/strings/str_cat.h>

#include "iscsi/libiscsi_connection.h"

namespace stagehand::iscsi {
namespace {

scsi_persistent_out_sa ServiceAction(ReserveAction action) {
  switch (action) {
    case ReserveAction::kRegister:
      return SCSI_PERSISTENT_RESERVE_REGISTER;
    case ReserveAction::kRegisterAndIgnoreExistingKey:
      return SCSI_PERSISTENT_RESERVE_REGISTER_AND_IGNORE_EXISTING_KEY;
    case ReserveAction::kReserve:
      return SCSI_PERSISTENT_RESERVE_RESERVE;
    case ReserveAction::kRelease:
      return SCSI_PERSISTENT_RESERVE_RELEASE;
    case ReserveAction::kPreempt:
      return SCSI_PERSISTENT_RESERVE_PREEMPT;
  }
  return SCSI_PERSISTENT_RESERVE_REGISTER;
}

const char* ActionName(ReserveAction action) {
  switch (action) {
    case ReserveAction::kRegister:
      return "REGISTER";
    case ReserveAction::kRegisterAndIgnoreExistingKey:
      return "REGISTER AND IGNORE EXISTING KEY";
    case ReserveAction::kReserve:
      return "RESERVE";
    case ReserveAction::kRelease:
      return "RELEASE";
    case ReserveAction::kPreempt:
      return "PREEMPT";
  }
  return "?";
}

// READ KEYS answers 8 bytes of header and 8 per key; room for this many keys first.
constexpr uint16_t kFirstKeys = 32;

}  // namespace

absl::Status Connection::ReservationFailed(const std::string& what,
                                           const absl::StatusOr<ScsiTask>& ran) const {
  if (ran.ok() && *ran) {
    const scsi_task& task = **ran;
    if (task.status == SCSI_STATUS_RESERVATION_CONFLICT) {
      return absl::FailedPreconditionError(absl::StrCat(what, ": RESERVATION CONFLICT"));
    }
    if (task.status == SCSI_STATUS_CHECK_CONDITION &&
        task.sense.key == SCSI_SENSE_ILLEGAL_REQUEST) {
      return absl::UnimplementedError(
          absl::StrCat(what, ": the target does not support it (ILLEGAL REQUEST, ",
                       scsi_sense_ascq_str(static_cast<int>(task.sense.ascq)), ")"));
    }
  }
  return Failed(what, ran);
}

absl::StatusOr<ScsiTask> Connection::RunPastUnitAttentions(
    const std::string& what, const std::function<scsi_task*(TaskStep*)>& start) {
  constexpr int kAttempts = 4;
  absl::StatusOr<ScsiTask> ran = Run(what, start);
  for (int i = 1;
       i < kAttempts && ran.ok() && *ran && (*ran)->status == SCSI_STATUS_CHECK_CONDITION &&
       (*ran)->sense.key == SCSI_SENSE_UNIT_ATTENTION;
       ++i) {
    ran = Run(what, start);
  }
  return ran;
}

absl::StatusOr<ScsiTask> Connection::ReserveIn(int action, uint16_t length) {
  return RunPastUnitAttentions(
      absl::StrCat("PERSISTENT RESERVE IN of ", what_), [&](TaskStep* step) {
        return iscsi_persistent_reserve_in_task(ctx_.get(), static_cast<int>(lun_), action, length,
                                                OnTaskStep, step);
      });
}

absl::StatusOr<Reservations> Connection::ReadReservations() {
  Reservations r;
  uint16_t length = 8 + 8 * kFirstKeys;
  while (true) {
    const std::string what = absl::StrCat("PERSISTENT RESERVE IN (READ KEYS) of ", what_);
    auto ran = ReserveIn(SCSI_PERSISTENT_RESERVE_READ_KEYS, length);
    if (!ran.ok() || !*ran || (*ran)->status != SCSI_STATUS_GOOD) {
      return ReservationFailed(what, ran);
    }
    const auto* keys =
        static_cast<scsi_persistent_reserve_in_read_keys*>(scsi_datain_unmarshall(ran->get()));
    if (keys == nullptr) {
      return absl::DataLossError(absl::StrCat(what, ": an answer libiscsi cannot read"));
    }
    const uint32_t listed = keys->additional_length / 8;
    if (listed > static_cast<uint32_t>(keys->num_keys) && length < 0xfff8) {
      // More keys than fit: ask again with room for all (what the target said it has).
      length = static_cast<uint16_t>(std::min<uint32_t>(8 + 8 * listed, 0xfff8));
      continue;
    }
    r.generation = keys->prgeneration;
    r.keys.assign(keys->keys, keys->keys + keys->num_keys);
    break;
  }
  const std::string what = absl::StrCat("PERSISTENT RESERVE IN (READ RESERVATION) of ", what_);
  auto ran = ReserveIn(SCSI_PERSISTENT_RESERVE_READ_RESERVATION, 24);
  if (!ran.ok() || !*ran || (*ran)->status != SCSI_STATUS_GOOD) {
    return ReservationFailed(what, ran);
  }
  const auto* held =
      static_cast<scsi_persistent_reserve_in_read_reservation*>(scsi_datain_unmarshall(ran->get()));
  if (held == nullptr) {
    return absl::DataLossError(absl::StrCat(what, ": an answer libiscsi cannot read"));
  }
  if (held->reserved != 0) {
    r.holder = held->reservation_key;
    r.type = held->pr_type;
  }
  return r;
}

absl::Status Connection::ReserveOut(ReserveAction action, uint64_t key, uint64_t service_key,
                                    uint8_t type) {
  const std::string what =
      absl::StrCat("PERSISTENT RESERVE OUT (", ActionName(action), ") of ", what_);
  scsi_persistent_reserve_out_basic params{};
  params.reservation_key = key;
  params.service_action_reservation_key = service_key;
  auto ran = RunPastUnitAttentions(what, [&](TaskStep* step) {
    return iscsi_persistent_reserve_out_task(
        ctx_.get(), static_cast<int>(lun_), ServiceAction(action), SCSI_PERSISTENT_RESERVE_SCOPE_LU,
        type, &params, OnTaskStep, step);
  });
  if (!ran.ok() || !*ran || (*ran)->status != SCSI_STATUS_GOOD) {
    return ReservationFailed(what, ran);
  }
  return absl::OkStatus();
}

}  // namespace stagehand::iscsi

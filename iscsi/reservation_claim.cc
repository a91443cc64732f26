#include "iscsi/reservation_claim.h"

#include <algorithm>
#include <optional>

#include <absl/strings/str_cat.h>

#include "iscsi/persistent_reservation.h"

namespace stagehand::iscsi {
namespace {

constexpr uint8_t kType = kWriteExclusiveRegistrantsOnly;

bool Listed(const Reservations& r, uint64_t key) {
  return std::find(r.keys.begin(), r.keys.end(), key) != r.keys.end();
}

std::string Holder(const std::optional<uint64_t>& holder) {
  return holder ? absl::StrCat("key ", FormatKey(*holder)) : std::string("no holder now");
}

absl::Status HeldByAnother(const std::optional<uint64_t>& holder) {
  return absl::FailedPreconditionError(
      absl::StrCat("the LUN is reserved by another node (", Holder(holder),
                   "; `stagehandctl iscsi key --node-id ID` prints the key prefix of a node id)"));
}

absl::Status Fenced(const std::optional<uint64_t>& holder) {
  return absl::PermissionDeniedError(
      absl::StrCat("this node's reservation of the LUN was taken over by another node (",
                   Holder(holder), "): it must not write to it any more"));
}

}  // namespace

// The target lost every registration since `held_at` (a restart without persistence): no
// key, no reservation, and a generation that went back (it only ever moves forward otherwise).
bool TargetForgot(const Reservations& r, uint32_t held_at) {
  return r.keys.empty() && !r.holder && r.generation < held_at;
}

absl::StatusOr<uint32_t> ClaimReservation(Connection& conn, uint64_t key,
                                          std::optional<uint32_t> held_at) {
  SH_ASSIGN_OR_RETURN(const Reservations before, conn.ReadReservations());
  if (held_at && !Listed(before, key) && TargetForgot(before, *held_at)) {
    held_at.reset();
  }
  const bool held_before = held_at.has_value();
  if (held_before && !Listed(before, key)) {
    return Fenced(before.holder);
  }
  if (before.holder && *before.holder != key) {
    return held_before ? Fenced(before.holder) : HeldByAnother(before.holder);
  }
  SH_RETURN_IF_ERROR(conn.ReserveOut(ReserveAction::kRegisterAndIgnoreExistingKey, 0, key, 0));
  // Held under this key already (on a nexus that is gone, or this one): take it over, which
  // also removes every other registration of the key. Else reserve it.
  absl::Status taken = before.holder ? conn.ReserveOut(ReserveAction::kPreempt, key, key, kType)
                                     : conn.ReserveOut(ReserveAction::kReserve, key, 0, kType);
  // What the target says now decides: another node may have reserved or preempted between the
  // read above and these commands.
  absl::StatusOr<Reservations> after = conn.ReadReservations();
  if (taken.ok() && after.ok() && after->holder == key) {
    return after->generation;
  }
  (void)conn.ReserveOut(ReserveAction::kRegister, key, 0, 0);  // Unregisters this nexus.
  if (!taken.ok() && taken.code() != absl::StatusCode::kFailedPrecondition) {
    return taken;  // Not a conflict: unsupported, or the connection failed.
  }
  if (!after.ok()) {
    return after.status();
  }
  return held_before ? Fenced(after->holder) : HeldByAnother(after->holder);
}

absl::Status JoinReservation(Connection& conn, uint64_t key) {
  SH_ASSIGN_OR_RETURN(const Reservations before, conn.ReadReservations());
  if (!Listed(before, key)) {
    return Fenced(before.holder);
  }
  return conn.ReserveOut(ReserveAction::kRegisterAndIgnoreExistingKey, 0, key, 0);
}

absl::Status ReleaseReservation(Connection& conn, uint64_t key) {
  SH_ASSIGN_OR_RETURN(const Reservations before, conn.ReadReservations());
  if (!Listed(before, key)) {
    return absl::OkStatus();  // Not registered (never, or fenced): nothing of ours to give up.
  }
  SH_RETURN_IF_ERROR(conn.ReserveOut(ReserveAction::kRegisterAndIgnoreExistingKey, 0, key, 0));
  // Removes the key's registrations on nexuses that are gone (and takes the reservation over
  // from them when one holds it), so that the release below is this nexus's to make.
  SH_RETURN_IF_ERROR(conn.ReserveOut(ReserveAction::kPreempt, key, key, kType));
  if (before.holder == key) {
    SH_RETURN_IF_ERROR(conn.ReserveOut(ReserveAction::kRelease, key, 0, kType));
  }
  return conn.ReserveOut(ReserveAction::kRegister, key, 0, 0);
}

}  // namespace stagehand::iscsi

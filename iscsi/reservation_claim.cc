#include "iscsi/reservation_claim.h"

#include <algorithm>
#include <vector>

#include <absl/strings/cord.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>

#include "iscsi/persistent_reservation.h"

namespace stagehand::iscsi {
namespace {

constexpr uint8_t kType = kWriteExclusiveRegistrantsOnly;

// The distinct keys of the node of `node_key` that `r` lists.
std::vector<uint64_t> NodeKeys(const Reservations& r, uint64_t node_key) {
  std::vector<uint64_t> out;
  for (uint64_t key : r.keys) {
    if (SameNode(key, node_key) && std::find(out.begin(), out.end(), key) == out.end()) {
      out.push_back(key);
    }
  }
  return out;
}

std::string Holder(const std::optional<uint64_t>& holder) {
  return holder ? absl::StrCat("key ", FormatKey(*holder)) : std::string("no holder now");
}

absl::Status HeldByAnother(const Reservations& r) {
  absl::Status s = absl::FailedPreconditionError(
      absl::StrCat("the LUN is reserved by another node (", Holder(r.holder),
                   "; `stagehandctl iscsi key --node-id ID` prints the key prefix of a node id)"));
  SetHolderKey(s, r.holder.value_or(0));
  SetHolderNodeKeys(s, r.holder ? NodeKeysDigest(r, *r.holder) : 0);
  return s;
}

absl::StatusOr<uint64_t> PayloadNumber(const absl::Status& status, const char* type) {
  uint64_t n = 0;
  auto payload = status.GetPayload(type);
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &n)) {
    return absl::NotFoundError("no such payload");
  }
  return n;
}

absl::Status Fenced(const std::optional<uint64_t>& holder) {
  return absl::PermissionDeniedError(
      absl::StrCat("this node's reservation of the LUN was taken over by another node (",
                   Holder(holder), "): it must not write to it any more"));
}

// The target lost every registration since `held_at` (a restart without persistence): no
// key, no reservation, and a generation that went back (it only ever moves forward otherwise).
bool TargetForgot(const Reservations& r, uint32_t held_at) {
  return r.keys.empty() && !r.holder && r.generation < held_at;
}

// Registers this nexus under a fresh key of the node of `node_key` (a nexus that held the
// reservation keeps it under the new key). The key.
absl::StatusOr<uint64_t> RegisterFresh(ReservationChannel& conn, uint64_t node_key,
                                       const Reservations& before) {
  const uint64_t mine = FreshKey(node_key, before.keys);
  SH_RETURN_IF_ERROR(conn.ReserveOut(ReserveAction::kRegisterAndIgnoreExistingKey, 0, mine, 0));
  return mine;
}

// Removes the registrations of `keys` under `mine`, the holder's first (its preemption hands
// this nexus the reservation).
absl::Status PreemptAll(ReservationChannel& conn, uint64_t mine, std::vector<uint64_t> keys,
                        const std::optional<uint64_t>& holder) {
  std::erase(keys, mine);
  if (holder && std::find(keys.begin(), keys.end(), *holder) != keys.end()) {
    std::erase(keys, *holder);
    keys.insert(keys.begin(), *holder);
  }
  for (uint64_t key : keys) {
    SH_RETURN_IF_ERROR(conn.ReserveOut(ReserveAction::kPreempt, mine, key, kType));
  }
  return absl::OkStatus();
}

// Takes the LUN under `mine` (registered): from the node's own registrations that are gone, or
// from the dead holder `takeover_key` (exactly that key first: one that moved since is alive,
// and its preemption fails) with every other registration of its node.
absl::Status TakeUnder(ReservationChannel& conn, uint64_t mine, uint64_t node_key,
                       uint64_t takeover_key) {
  SH_ASSIGN_OR_RETURN(const Reservations now, conn.ReadReservations());
  if (takeover_key != 0) {
    SH_RETURN_IF_ERROR(conn.ReserveOut(ReserveAction::kPreempt, mine, takeover_key, kType));
    std::vector<uint64_t> rest = NodeKeys(now, takeover_key);
    std::erase(rest, takeover_key);
    return PreemptAll(conn, mine, rest, std::nullopt);
  }
  SH_RETURN_IF_ERROR(PreemptAll(conn, mine, NodeKeys(now, node_key), now.holder));
  return now.holder ? absl::OkStatus() : conn.ReserveOut(ReserveAction::kReserve, mine, 0, kType);
}

}  // namespace

void SetHolderKey(absl::Status& status, uint64_t key) {
  if (key != 0) {
    status.SetPayload(kHolderKeyPayload, absl::Cord(absl::StrCat(key)));
  }
}

uint64_t HolderKeyOf(const absl::Status& status) {
  return PayloadNumber(status, kHolderKeyPayload).value_or(0);
}

void SetHolderNodeKeys(absl::Status& status, uint64_t digest) {
  if (digest != 0) {
    status.SetPayload(kHolderNodeKeysPayload, absl::Cord(absl::StrCat(digest)));
  }
}

uint64_t HolderNodeKeysOf(const absl::Status& status) {
  return PayloadNumber(status, kHolderNodeKeysPayload).value_or(0);
}

uint64_t NodeKeysDigest(const Reservations& r, uint64_t node_key) {
  std::vector<uint64_t> keys = NodeKeys(r, node_key);
  std::sort(keys.begin(), keys.end());
  uint64_t digest = 0xcbf29ce484222325ULL;  // FNV-1a over the keys' bytes.
  for (uint64_t key : keys) {
    for (int i = 0; i < 8; ++i) {
      digest = (digest ^ ((key >> (8 * i)) & 0xff)) * 0x100000001b3ULL;
    }
  }
  return keys.empty() ? 0 : digest;
}

absl::StatusOr<Claim> ClaimReservation(ReservationChannel& conn, uint64_t node_key,
                                       std::optional<uint32_t> held_at, uint64_t takeover_key,
                                       uint64_t takeover_node_keys) {
  SH_ASSIGN_OR_RETURN(const Reservations before, conn.ReadReservations());
  std::vector<uint64_t> own = NodeKeys(before, node_key);
  if (held_at && own.empty() && TargetForgot(before, *held_at)) {
    held_at.reset();
  }
  const bool held_before = held_at.has_value();
  if (held_before && own.empty()) {
    return Fenced(before.holder);
  }
  const bool other_holds = before.holder && !SameNode(*before.holder, node_key);
  // A dead holder (its key has not moved for the takeover time) is taken over, with every
  // registration of its node; a live one refuses.
  const bool take_over =
      other_holds && !held_before && takeover_key != 0 && *before.holder == takeover_key &&
      (takeover_node_keys == 0 || NodeKeysDigest(before, takeover_key) == takeover_node_keys);
  if (other_holds && !take_over) {
    return held_before ? Fenced(before.holder) : HeldByAnother(before);
  }
  // Held by this node already (on a nexus that is gone, or under an older key): take it over
  // and remove the node's other registrations. Held by a dead node: the same, from it.
  absl::StatusOr<uint64_t> mine = RegisterFresh(conn, node_key, before);
  absl::Status taken = mine.status();
  if (mine.ok()) {
    taken = TakeUnder(conn, *mine, node_key, take_over ? takeover_key : 0);
  }
  // What the target says now decides: another node may have reserved or preempted between the
  // read above and these commands.
  absl::StatusOr<Reservations> after = conn.ReadReservations();
  if (taken.ok() && after.ok() && after->holder == *mine) {
    return Claim{.key = *mine,
                 .generation = after->generation,
                 .took_over_from = take_over ? takeover_key : 0};
  }
  if (mine.ok()) {
    (void)conn.ReserveOut(ReserveAction::kRegister, *mine, 0, 0);  // Unregisters this nexus.
  }
  if (!taken.ok() && taken.code() != absl::StatusCode::kFailedPrecondition) {
    return taken;  // Not a conflict: unsupported, or the connection failed.
  }
  if (!after.ok()) {
    return after.status();
  }
  return held_before ? Fenced(after->holder) : HeldByAnother(*after);
}

absl::Status StageRefusal(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kFailedPrecondition: {
      // Like the kubelet's Multi-Attach error: the stage is retried, and succeeds once the
      // holder has released the LUN, or has been dead for the takeover time.
      absl::Status busy = absl::UnavailableError(
          absl::StrCat("the volume is in use on another node: ", status.message(),
                       ". It is staged here once that node unstages it, or once its key has not "
                       "moved for the takeover time (a dead node)"));
      SetHolderKey(busy, HolderKeyOf(status));
      SetHolderNodeKeys(busy, HolderNodeKeysOf(status));
      return busy;
    }
    case absl::StatusCode::kUnimplemented:
      return absl::FailedPreconditionError(absl::StrCat(
          "the target does not support SCSI-3 persistent reservations (", status.message(),
          "): a single-node volume needs them to keep another node from writing to it; to stage "
          "it without that protection, set takeoverAfter: \"off\" in its volume context"));
    default:
      return absl::Status(status.code(),
                          absl::StrCat("cannot reserve the LUN for this node: ", status.message()));
  }
}

absl::StatusOr<uint64_t> JoinReservation(ReservationChannel& conn, uint64_t node_key) {
  SH_ASSIGN_OR_RETURN(const Reservations before, conn.ReadReservations());
  if (NodeKeys(before, node_key).empty()) {
    return Fenced(before.holder);
  }
  const uint64_t mine = FreshKey(node_key, before.keys);
  SH_RETURN_IF_ERROR(conn.ReserveOut(ReserveAction::kRegisterAndIgnoreExistingKey, 0, mine, 0));
  return mine;
}

absl::Status ReleaseReservation(ReservationChannel& conn, uint64_t node_key) {
  SH_ASSIGN_OR_RETURN(const Reservations before, conn.ReadReservations());
  if (NodeKeys(before, node_key).empty()) {
    return absl::OkStatus();  // Not registered (never, or fenced): nothing of ours to give up.
  }
  // Removes the node's registrations on nexuses that are gone (taking the reservation over
  // from the one that holds it), so that the release below is this nexus's to make.
  SH_ASSIGN_OR_RETURN(const uint64_t mine, RegisterFresh(conn, node_key, before));
  SH_ASSIGN_OR_RETURN(const Reservations now, conn.ReadReservations());
  SH_RETURN_IF_ERROR(PreemptAll(conn, mine, NodeKeys(now, node_key), now.holder));
  SH_ASSIGN_OR_RETURN(const Reservations after, conn.ReadReservations());
  if (after.holder == mine) {
    SH_RETURN_IF_ERROR(conn.ReserveOut(ReserveAction::kRelease, mine, 0, kType));
  }
  return conn.ReserveOut(ReserveAction::kRegister, mine, 0, 0);
}

}  // namespace stagehand::iscsi

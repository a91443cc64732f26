#pragma once

// Claiming a LUN for one node's writes with a SCSI-3 persistent reservation of type Write
// Exclusive - Registrants Only, on one I_T nexus (an iscsi::ReservationChannel: a libiscsi
// connection, or a disk of the host's initiator): what every login of a
// single-writer volume must do before its first write, and undo when the volume is given up.
//
// A node's keys share their upper 32 bits (iscsi/persistent_reservation.h); every claim and
// every renewal registers a fresh lower half, so that a live holder's key keeps moving and a
// waiting node can tell a dead holder by a key that does not.
//
// Registrations belong to a nexus, and every new login is a new nexus: a reconnect, or a
// successor process, finds its node's earlier registration (and the reservation) orphaned on a
// nexus that is gone. It registers again and takes the reservation over from that orphan
// (PREEMPT of its own key, as Pacemaker's fence_scsi does) - but only while a key of its node is
// still registered: once another node has preempted it, it is fenced and must never register
// again on its own. Under Write Exclusive - Registrants Only every registrant may write, so a
// nexus that did not get the reservation is unregistered again before the claim returns.

#include <cstdint>
#include <optional>

#include "base/status.h"
#include "iscsi/persistent_reservation.h"

namespace stagehand::iscsi {

// The payload (a decimal key) of a FailedPrecondition that another node's holder caused, on
// absl::Status: its key, for a caller that counts how long it stays unchanged.
inline constexpr char kHolderKeyPayload[] = "type.stagehand.dev/reservation-holder-key";

// And a digest of every key the holder's node has registered (each path of a multipath holder
// registers; its renewal moves them all): a waiting node takes the holder for dead only when
// neither the holder's key nor this moved for the takeover time.
inline constexpr char kHolderNodeKeysPayload[] = "type.stagehand.dev/reservation-holder-node-keys";

// Puts `key` on `status` as its kHolderKeyPayload (nothing for 0).
void SetHolderKey(absl::Status& status, uint64_t key);
// The key `status` carries as its kHolderKeyPayload; 0: none.
uint64_t HolderKeyOf(const absl::Status& status);
// The same for kHolderNodeKeysPayload.
void SetHolderNodeKeys(absl::Status& status, uint64_t digest);
uint64_t HolderNodeKeysOf(const absl::Status& status);

// The digest of the distinct keys `r` lists of the node of `node_key` (0 when none).
uint64_t NodeKeysDigest(const Reservations& r, uint64_t node_key);

struct Claim {
  uint64_t key = 0;         // This nexus's registration now (the reservation's key).
  uint32_t generation = 0;  // The target's generation after the claim.
  // The dead holder's key (`takeover_key`) that this claim preempted; 0: it preempted no other
  // node (the LUN was free, or already this node's).
  uint64_t took_over_from = 0;
};

// Claims the LUN of `conn` for the node of `node_key` (any key of the node). `held_at`: this
// node held it on an earlier nexus of this volume (a reconnect or a successor), and the
// target's generation was this when it last claimed it; nullopt: a first claim.
// `takeover_key`: non-zero, another node's key that the caller saw hold the LUN unchanged for
// longer than the takeover time (a dead holder): if it still holds it, and every key of its
// node is still the same (`takeover_node_keys`, their NodeKeysDigest; 0: unchecked), it is
// preempted; a node whose other paths renewed meanwhile is alive.
// Returns this nexus's key and the generation: the LUN is reserved for this nexus.
// FailedPrecondition: another node holds the LUN (the message names its key); this nexus is
//   left unregistered.
// PermissionDenied: held before, and no key of this node is registered any more: another node
//   preempted it (fenced); this nexus is left unregistered. Except where the target forgot every
//   registration (no keys, no reservation, its generation below `held_at`: it restarted without
//   persisting them, as tgt does): then this is a first claim again.
// Unimplemented: the target does not support persistent reservations.
// Others: the commands' errors (the connection failed).
absl::StatusOr<Claim> ClaimReservation(ReservationChannel& conn, uint64_t node_key,
                                       std::optional<uint32_t> held_at, uint64_t takeover_key = 0,
                                       uint64_t takeover_node_keys = 0);

// What a stage of a single-node volume says when ClaimReservation failed with `status`:
// Unavailable "in use on another node" for FailedPrecondition (retried by the kubelet, like its
// Multi-Attach error; the holder's key kept as kHolderKeyPayload), FailedPrecondition naming
// takeoverAfter "off" for Unimplemented, the same code with the cause otherwise.
absl::Status StageRefusal(const absl::Status& status);

// Registers this nexus under a fresh key of the node of `node_key` beside another nexus of the
// node that holds the LUN (a process taking a volume over while the one that serves it still
// does, which must not lose its registration meanwhile): under Write Exclusive - Registrants
// Only every registrant may write. Returns the key. PermissionDenied when no key of the node is
// registered (fenced, or the target forgot it: the next reconnect's claim tells which).
absl::StatusOr<uint64_t> JoinReservation(ReservationChannel& conn, uint64_t node_key);

// Gives the LUN up: releases the reservation when the node of `node_key` holds it and removes
// every registration of the node (this nexus's and those left on nexuses that are gone).
absl::Status ReleaseReservation(ReservationChannel& conn, uint64_t node_key);

}  // namespace stagehand::iscsi

#pragma once

// Claiming a LUN for one node's writes with a SCSI-3 persistent reservation of type Write
// Exclusive - Registrants Only, on one I_T nexus (an iscsi::Connection): what every login of a
// single-writer volume must do before its first write, and undo when the volume is given up.
//
// Registrations belong to a nexus, and every new login is a new nexus: a reconnect, or a
// successor process, finds its node's earlier registration (and the reservation) orphaned on a
// nexus that is gone. It registers again and takes the reservation over from that orphan
// (PREEMPT of its own key, as Pacemaker's fence_scsi does) - but only while its key is still
// registered: once another node has preempted it, it is fenced and must never register again
// on its own. Under Write Exclusive - Registrants Only every registrant may write, so a nexus
// that did not get the reservation is unregistered again before the claim returns.

#include <cstdint>
#include <optional>

#include "base/status.h"
#include "iscsi/libiscsi_connection.h"

namespace stagehand::iscsi {

// Claims the LUN of `conn` for `key` (a node key, iscsi/persistent_reservation.h). `held_at`:
// this node held it on an earlier nexus of this volume (a reconnect or a successor), and the
// target's generation was this when it last claimed it; nullopt: a first claim.
// Returns the target's generation after the claim: this nexus is registered under `key` and
//   the LUN is reserved for it.
// FailedPrecondition: another node holds the LUN (the message names its key); this nexus is
//   left unregistered.
// PermissionDenied: held before, and this node's registration is gone: another node preempted
//   it (fenced); this nexus is left unregistered. Except where the target forgot every
//   registration (no keys, no reservation, its generation below `held_at`: it restarted without
//   persisting them, as tgt does): then this is a first claim again.
// Unimplemented: the target does not support persistent reservations.
// Others: the commands' errors (the connection failed).
absl::StatusOr<uint32_t> ClaimReservation(Connection& conn, uint64_t key,
                                          std::optional<uint32_t> held_at);

// Registers this nexus under `key` beside another nexus of this node that holds the LUN (a
// process taking a volume over while the one that serves it still does, which must not lose
// its registration meanwhile): under Write Exclusive - Registrants Only every registrant may
// write. PermissionDenied when `key` holds no registration (fenced, or the target forgot it: the
// next reconnect's claim tells which).
absl::Status JoinReservation(Connection& conn, uint64_t key);

// Gives the LUN up: releases the reservation when `key` holds it and unregisters this nexus
// (and any registration of `key` left on nexuses that are gone).
absl::Status ReleaseReservation(Connection& conn, uint64_t key);

}  // namespace stagehand::iscsi

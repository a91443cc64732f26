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

#include "base/status.h"
#include "iscsi/libiscsi_connection.h"

namespace stagehand::iscsi {

// Claims the LUN of `conn` for `key` (a node key, iscsi/persistent_reservation.h). `held_before`:
// this node held it on an earlier nexus of this volume (a reconnect or a successor).
// OK: this nexus is registered under `key` and the LUN is reserved for it.
// FailedPrecondition: another node holds the LUN (the message names its key); this nexus is
//   left unregistered.
// PermissionDenied: held before, and this node's registration is gone: another node preempted
//   it (fenced); this nexus is left unregistered.
// Unimplemented: the target does not support persistent reservations.
// Others: the commands' errors (the connection failed).
absl::Status ClaimReservation(Connection& conn, uint64_t key, bool held_before);

// Gives the LUN up: releases the reservation when `key` holds it and unregisters this nexus
// (and any registration of `key` left on nexuses that are gone).
absl::Status ReleaseReservation(Connection& conn, uint64_t key);

}  // namespace stagehand::iscsi

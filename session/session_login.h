#pragma once

// A session process's logins outside its serving loop: the login parameters its config names,
// the first portal that answers, and the LUN's reservation as a volume claims it at its first
// login and gives it up at a deliberate stop (iscsi/reservation_claim.h; the reconnector claims
// it again on every later login).

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/status.h"
#include "iscsi/libiscsi_connection.h"
#include "iscsi/reservation_claim.h"
#include "iscsi/target_spec.h"
#include "proto/state.pb.h"

namespace stagehand::session {

// The login parameters of `config`, with `keepalive` called while a step waits; its portals in
// `*portals`, the first one in the parameters.
iscsi::LoginParams LoginParamsFor(const state::v1::SessionConfig& config,
                                  std::function<void()> keepalive,
                                  std::vector<iscsi::Portal>* portals);

// Logs in at the first portal that answers (the others are failover targets); `params` ends
// with the portal used.
absl::StatusOr<std::unique_ptr<iscsi::Connection>> LoginAnyPortal(
    const std::vector<iscsi::Portal>& portals, iscsi::LoginParams* params);

// The first claim of a volume's LUN for the node of `node_key`, before any I/O, preempting
// `takeover_key` if it still holds the LUN (iscsi::ClaimReservation). Errors as the container
// orchestrator should see them: Unavailable while another node holds the LUN (retry: it may
// release it, or be taken over; the holder's key as iscsi::kHolderKeyPayload),
// FailedPrecondition for a target without persistent reservations, unless `optional`: then a
// Claim with key 0 (no reservation; stderr says so).
absl::StatusOr<iscsi::Claim> ClaimForVolume(iscsi::Connection& conn, uint64_t node_key,
                                            uint64_t takeover_key, uint64_t takeover_node_keys,
                                            bool optional);

// A deliberate stop of the volume (its unstage): a new login gives up what the node of
// `node_key` holds, on this nexus and on any nexus of this node that is gone. Best effort,
// once: the caller logs what failed (a reservation left behind keeps other nodes out until it
// is taken over or an operator releases it).
absl::Status ReleaseForVolume(const state::v1::SessionConfig& config, uint64_t node_key);

// ReleaseForVolume of the config's node key, with what failed on stderr (the unit's journal).
void ReleaseAtStop(const state::v1::SessionConfig& config);

}  // namespace stagehand::session

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

// The first claim of a volume's LUN for `key`, before any I/O: the target's generation after
// it. Errors as the container orchestrator should see them: Unavailable while another node
// holds the LUN (retry: it may release it), FailedPrecondition for a target without persistent
// reservations.
absl::StatusOr<uint32_t> ClaimForVolume(iscsi::Connection& conn, uint64_t key);

// A deliberate stop of the volume (its unstage): a new login gives up what `key` holds, on
// this nexus and on any nexus of this node that is gone. Best effort, once: the caller logs
// what failed (a reservation left behind keeps other nodes out until an operator releases it).
absl::Status ReleaseForVolume(const state::v1::SessionConfig& config, uint64_t key);

}  // namespace stagehand::session

#include "session/session_login.h"

#include <cstdio>
#include <string>
#include <utility>

#include <absl/strings/str_cat.h>

#include "iscsi/reservation_claim.h"
#include "iscsi/state_conversions.h"

namespace stagehand::session {

iscsi::LoginParams LoginParamsFor(const state::v1::SessionConfig& config,
                                  std::function<void()> keepalive,
                                  std::vector<iscsi::Portal>* portals) {
  iscsi::LoginParams params;
  params.keepalive = std::move(keepalive);
  params.iqn = config.iqn();
  params.lun = config.lun();
  params.initiator_name = config.initiator_name();
  if (!config.chap_user().empty()) {
    params.chap = iscsi::ChapCredentials{config.chap_user(), config.chap_secret(),
                                         config.chap_user_in(), config.chap_secret_in()};
  }
  for (const auto& p : config.portals()) {
    portals->push_back(iscsi::FromProto(p));
  }
  if (!portals->empty()) {
    params.portal = portals->front();
  }
  return params;
}

absl::StatusOr<std::unique_ptr<iscsi::Connection>> LoginAnyPortal(
    const std::vector<iscsi::Portal>& portals, iscsi::LoginParams* params) {
  absl::Status last = absl::UnavailableError("no portal tried");
  for (const auto& portal : portals) {
    params->portal = portal;
    auto c = iscsi::Connection::Login(*params);
    if (c.ok()) {
      return std::move(*c);
    }
    last = c.status();
    // Authentication and naming errors are the same on every portal.
    if (last.code() != absl::StatusCode::kUnavailable) {
      break;
    }
  }
  return last;
}

absl::StatusOr<iscsi::Claim> ClaimForVolume(iscsi::Connection& conn, uint64_t node_key,
                                            uint64_t takeover_key, uint64_t takeover_node_keys,
                                            bool optional) {
  auto claimed =
      iscsi::ClaimReservation(conn, node_key, std::nullopt, takeover_key, takeover_node_keys);
  if (claimed.ok()) {
    return claimed;
  }
  if (optional && absl::IsUnimplemented(claimed.status())) {
    std::fprintf(stderr,
                 "stagehand-session: the target does not support SCSI-3 persistent "
                 "reservations: the volume is served without one (takeoverAfter off), and "
                 "another node could write to it too\n");
    return iscsi::Claim{};
  }
  return iscsi::StageRefusal(claimed.status());
}

absl::Status ReleaseForVolume(const state::v1::SessionConfig& config, uint64_t node_key) {
  std::vector<iscsi::Portal> portals;
  iscsi::LoginParams params = LoginParamsFor(config, {}, &portals);
  SH_ASSIGN_OR_RETURN(std::unique_ptr<iscsi::Connection> conn, LoginAnyPortal(portals, &params));
  return iscsi::ReleaseReservation(*conn, node_key);
}

void ReleaseAtStop(const state::v1::SessionConfig& config) {
  if (absl::Status released = ReleaseForVolume(config, config.reservation_key()); !released.ok()) {
    std::fprintf(stderr,
                 "stagehand-session: volume %s: cannot release the LUN's reservation: %s; other "
                 "nodes cannot stage it until this node's key is taken over or released "
                 "(stagehandctl iscsi reservation)\n",
                 config.volume_id().c_str(), std::string(released.message()).c_str());
  }
}

}  // namespace stagehand::session

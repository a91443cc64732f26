#include "ctl/iscsi_reservation.h"

#include <algorithm>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include "ctl/format.h"
#include "iscsi/reservation_claim.h"

namespace stagehand::ctl {
namespace {

// The node of `key` among `node_ids`, or "".
std::string Owner(uint64_t key, const std::vector<std::string>& node_ids) {
  for (const std::string& id : node_ids) {
    if (iscsi::IsNodeKey(key, id)) {
      return id;
    }
  }
  return "";
}

std::string Prefix(const std::string& node_id) {
  return absl::StrFormat("0x%08x********", iscsi::NodeKeyPrefix(node_id));
}

}  // namespace

absl::StatusOr<iscsi::Reservations> ReadReservations(const iscsi::LoginParams& params) {
  SH_ASSIGN_OR_RETURN(auto conn, iscsi::Connection::Login(params));
  SH_ASSIGN_OR_RETURN(iscsi::Reservations r, conn->ReadReservations());
  SH_RETURN_IF_ERROR(conn->Logout());
  return r;
}

absl::StatusOr<iscsi::Reservations> ReleaseNode(const iscsi::LoginParams& params,
                                                const std::string& node_id) {
  using iscsi::ReserveAction;
  constexpr uint8_t kType = iscsi::kWriteExclusiveRegistrantsOnly;
  SH_ASSIGN_OR_RETURN(auto conn, iscsi::Connection::Login(params));
  SH_ASSIGN_OR_RETURN(const iscsi::Reservations before, conn->ReadReservations());
  std::vector<uint64_t> keys;
  for (uint64_t key : before.keys) {
    if (iscsi::IsNodeKey(key, node_id) && std::find(keys.begin(), keys.end(), key) == keys.end()) {
      keys.push_back(key);
    }
  }
  if (keys.empty()) {
    return absl::NotFoundError(absl::StrCat("node '", node_id, "' (keys ", Prefix(node_id),
                                            ") has no registration on this LUN"));
  }
  // A key no node's prefix can be mistaken for: the released node's own, rotated.
  const uint64_t mine = iscsi::NodeKey(absl::StrCat("stagehandctl release ", node_id), 1);
  SH_RETURN_IF_ERROR(conn->ReserveOut(ReserveAction::kRegisterAndIgnoreExistingKey, 0, mine, 0));
  absl::Status done = absl::OkStatus();
  for (uint64_t key : keys) {
    done.Update(conn->ReserveOut(ReserveAction::kPreempt, mine, key, kType));
  }
  auto now = conn->ReadReservations();
  if (now.ok() && now->holder == mine) {
    done.Update(conn->ReserveOut(ReserveAction::kRelease, mine, 0, kType));
  }
  done.Update(conn->ReserveOut(ReserveAction::kRegister, mine, 0, 0));  // Unregisters.
  SH_RETURN_IF_ERROR(done);
  SH_ASSIGN_OR_RETURN(iscsi::Reservations after, conn->ReadReservations());
  (void)conn->Logout();
  return after;
}

absl::StatusOr<iscsi::Reservations> TakeOverFor(const iscsi::LoginParams& params,
                                                const std::string& node_id) {
  SH_ASSIGN_OR_RETURN(auto conn, iscsi::Connection::Login(params));
  SH_ASSIGN_OR_RETURN(const iscsi::Reservations before, conn->ReadReservations());
  const uint64_t key = iscsi::NodeKey(node_id, 0);
  if (before.holder && iscsi::SameNode(*before.holder, key)) {
    (void)conn->Logout();
    return before;  // The node holds it already (taking its own keys over would fence it).
  }
  const uint64_t holder = before.holder.value_or(0);
  if (auto claimed = iscsi::ClaimReservation(*conn, key, std::nullopt, holder); !claimed.ok()) {
    if (absl::IsFailedPrecondition(claimed.status())) {
      return absl::FailedPreconditionError(absl::StrCat(
          claimed.status().message(),
          "; the holder renewed its key while this ran, so its node is alive: nothing changed"));
    }
    return claimed.status();
  }
  SH_ASSIGN_OR_RETURN(iscsi::Reservations after, conn->ReadReservations());
  (void)conn->Logout();
  return after;
}

google::protobuf::Struct ToStruct(const ReservationReport& r) {
  google::protobuf::Struct s;
  auto& f = *s.mutable_fields();
  f["portal"] = StringValue(r.portal);
  f["iqn"] = StringValue(r.iqn);
  f["lun"] = NumberValue(r.lun);
  f["generation"] = NumberValue(r.state.generation);
  auto* keys = f["registrations"].mutable_list_value();
  for (uint64_t key : r.state.keys) {
    google::protobuf::Value entry;
    auto& e = *entry.mutable_struct_value()->mutable_fields();
    e["key"] = StringValue(iscsi::FormatKey(key));
    e["node"] = StringValue(Owner(key, r.node_ids));
    *keys->add_values() = std::move(entry);
  }
  if (r.state.holder) {
    auto& h = *f["reservation"].mutable_struct_value()->mutable_fields();
    h["key"] = StringValue(iscsi::FormatKey(*r.state.holder));
    h["node"] = StringValue(Owner(*r.state.holder, r.node_ids));
    h["type"] = StringValue(iscsi::ReservationTypeName(r.state.type));
  }
  return s;
}

std::string FormatReservations(const ReservationReport& r) {
  auto named = [&](uint64_t key) {
    const std::string owner = Owner(key, r.node_ids);
    return owner.empty() ? iscsi::FormatKey(key)
                         : absl::StrCat(iscsi::FormatKey(key), " (node ", owner, ")");
  };
  std::string out = absl::StrCat("target:        ", r.iqn, " lun ", r.lun, " at ", r.portal, "\n",
                                 "generation:    ", r.state.generation, "\n");
  if (r.state.keys.empty()) {
    absl::StrAppend(&out, "registrations: none\n");
  } else {
    absl::StrAppend(&out, "registrations:\n");
    for (uint64_t key : r.state.keys) {
      absl::StrAppend(&out, "  ", named(key), "\n");
    }
  }
  absl::StrAppend(&out, "reservation:   ",
                  r.state.holder ? absl::StrCat(named(*r.state.holder), ", ",
                                                iscsi::ReservationTypeName(r.state.type))
                                 : "none",
                  "\n");
  return out;
}

std::string FormatNodeKeys(const std::vector<std::string>& node_ids) {
  std::string out;
  for (const std::string& id : node_ids) {
    absl::StrAppend(&out, id, "  ", Prefix(id), "\n");
  }
  return out;
}

google::protobuf::Struct NodeKeysToStruct(const std::vector<std::string>& node_ids) {
  google::protobuf::Struct s;
  auto* list = (*s.mutable_fields())["nodes"].mutable_list_value();
  for (const std::string& id : node_ids) {
    google::protobuf::Value entry;
    auto& e = *entry.mutable_struct_value()->mutable_fields();
    e["nodeId"] = StringValue(id);
    e["keyPrefix"] = StringValue(Prefix(id));
    *list->add_values() = std::move(entry);
  }
  return s;
}

}  // namespace stagehand::ctl

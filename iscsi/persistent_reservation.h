#pragma once

// SCSI-3 persistent reservations (SPC-4 PERSISTENT RESERVE IN and OUT): what a LUN's
// registrations and reservation are, and the keys stagehand registers under.
//
// A node's key is derived from its node id: the upper 32 bits are the first four bytes of the
// SHA-256 of the node id (never 0), the lower 32 bits are free for the node to change (a
// renewal that the target's generation counter makes visible). So any key tells whose it is:
// `stagehandctl iscsi key --node-id N` prints a node's prefix.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace stagehand::iscsi {

// SPC-4 reservation type codes.
inline constexpr uint8_t kWriteExclusive = 1;
inline constexpr uint8_t kWriteExclusiveRegistrantsOnly = 5;

// What PERSISTENT RESERVE IN (READ KEYS, READ RESERVATION) says of a LUN.
struct Reservations {
  uint32_t generation = 0;         // The target's PRgeneration: moves with every registration.
  std::vector<uint64_t> keys;      // Registered keys, one per I_T nexus (a key may repeat).
  std::optional<uint64_t> holder;  // The reservation's key, when the LUN is reserved.
  uint8_t type = 0;                // Its SPC type code (kWriteExclusiveRegistrantsOnly, ...).
};

// The PERSISTENT RESERVE OUT service actions stagehand uses.
enum class ReserveAction {
  kRegister,                      // key (0: not registered yet) -> service key (0: unregister)
  kRegisterAndIgnoreExistingKey,  // -> service key, whatever this nexus had
  kReserve,                       // key, type
  kRelease,                       // key, type
  kPreempt,                       // key; removes the registrations of service key
};

// The two PERSISTENT RESERVE commands on one I_T nexus to one LUN: a libiscsi connection
// (iscsi::Connection) or a SCSI disk of the host's initiator (SG_IO on /dev/sdX). Not
// thread-safe.
class ReservationChannel {
 public:
  virtual ~ReservationChannel() = default;

  // PERSISTENT RESERVE IN: READ KEYS, then READ RESERVATION. Unimplemented when the target has
  // no persistent reservations (ILLEGAL REQUEST).
  virtual absl::StatusOr<Reservations> ReadReservations() = 0;

  // PERSISTENT RESERVE OUT `action` on this nexus, LU scope (`type`: reserve, release and
  // preempt). FailedPrecondition naming RESERVATION CONFLICT when the target refuses it as one;
  // Unimplemented when it does not support the action (ILLEGAL REQUEST).
  virtual absl::Status ReserveOut(ReserveAction action, uint64_t key, uint64_t service_key,
                                  uint8_t type) = 0;
};

// The upper 32 bits of every key of `node_id`.
uint32_t NodeKeyPrefix(std::string_view node_id);

// `node_id`'s key with `rotation` as its lower 32 bits. Never 0.
uint64_t NodeKey(std::string_view node_id, uint32_t rotation);

// Whether `key` is one of `node_id`'s.
bool IsNodeKey(uint64_t key, std::string_view node_id);

// Whether `a` and `b` are keys of the same node (the same upper 32 bits).
inline bool SameNode(uint64_t a, uint64_t b) {
  return a >> 32 == b >> 32;
}

// A key of the node of `node_key` with a random lower half that `taken` does not list: what a
// new registration or a renewal moves to, so that READ KEYS shows the node alive.
uint64_t FreshKey(uint64_t node_key, const std::vector<uint64_t>& taken);

// "0x1a2b3c4d00000007".
std::string FormatKey(uint64_t key);

// "Write Exclusive - Registrants Only" for 5, ...; "type N" for codes SPC-4 does not name.
std::string ReservationTypeName(uint8_t type);

}  // namespace stagehand::iscsi

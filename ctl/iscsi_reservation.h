#pragma once

// stagehandctl's view of a LUN's SCSI-3 persistent reservations (`iscsi reservation`) and of the
// keys a node registers under (`iscsi key`): who holds a LUN, and whose each key is.

#include <string>
#include <vector>

#include <google/protobuf/struct.pb.h>

#include "base/status.h"
#include "iscsi/libiscsi_connection.h"
#include "iscsi/persistent_reservation.h"

namespace stagehand::ctl {

struct ReservationReport {
  std::string portal;
  std::string iqn;
  uint32_t lun = 0;
  iscsi::Reservations state;
  // Node ids to name the keys by (--node-id): a key is a node's when its upper 32 bits are
  // that node's prefix.
  std::vector<std::string> node_ids;
};

// Logs in, reads the LUN's registrations and reservation (PERSISTENT RESERVE IN) and logs out.
absl::StatusOr<iscsi::Reservations> ReadReservations(const iscsi::LoginParams& params);

// `iscsi reservation --release-node N --node-is-dead`: for an operator who knows node N is dead.
// Logs in, removes every registration of N and its reservation (PREEMPT under a key of this
// process's own, then RELEASE and unregister), so that the next claim of another node
// succeeds. N is fenced by it: were it alive after all, its writes would fail from then on.
// NotFound when N has no registration. Returns the LUN's state afterwards.
absl::StatusOr<iscsi::Reservations> ReleaseNode(const iscsi::LoginParams& params,
                                                const std::string& node_id);

// `iscsi reservation --take-over-for N --holder-is-dead`: for an operator who knows the node
// holding the LUN is dead and wants node N to have it. Logs in and reserves the LUN under N's
// key (iscsi::ClaimReservation), preempting the holder seen at the start and every registration
// of its node (fenced). Nothing else can stage it until N does: N's next stage takes its own
// node's registration over. FailedPrecondition when the holder renewed its key meanwhile (its
// node is alive). Returns the LUN's state afterwards.
absl::StatusOr<iscsi::Reservations> TakeOverFor(const iscsi::LoginParams& params,
                                                const std::string& node_id);

// For `-o json` and for people.
google::protobuf::Struct ToStruct(const ReservationReport& r);
std::string FormatReservations(const ReservationReport& r);

// `iscsi key`: each node id with its key prefix ("node-a  0x1a2b3c4d********").
std::string FormatNodeKeys(const std::vector<std::string>& node_ids);
google::protobuf::Struct NodeKeysToStruct(const std::vector<std::string>& node_ids);

}  // namespace stagehand::ctl

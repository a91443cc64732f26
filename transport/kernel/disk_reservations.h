#pragma once

// SCSI-3 persistent reservations on a disk of the host's iSCSI initiator: PERSISTENT RESERVE
// IN and OUT sent with SG_IO to /dev/sdX, so on that disk's I_T nexus (its iSCSI session).
// linux/pr.h's block-layer ioctls would do the OUT half, but the kernels of today (Debian 12's
// 6.1) cannot read keys or the holder through them; SG_IO does both, on a path of a
// dm-multipath map too (a map's registrations are those of its paths).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "iscsi/persistent_reservation.h"

namespace stagehand::transport::kernel {

// What a SCSI command's completion says, as far as the reservation code cares.
struct ScsiOutcome {
  uint8_t status = 0;     // SAM status: 0 GOOD, 2 CHECK CONDITION, 0x18 RESERVATION CONFLICT.
  uint8_t sense_key = 0;  // With CHECK CONDITION: 5 ILLEGAL REQUEST, 6 UNIT ATTENTION, ...
  uint8_t asc = 0;
  uint8_t ascq = 0;
  // The transport failed the command (host or driver status): no SCSI answer at all.
  bool transport_failed = false;
};

// The sense key, ASC and ASCQ of fixed (0x70, 0x71) or descriptor (0x72, 0x73) sense data.
void ReadSense(std::span<const uint8_t> sense, ScsiOutcome* out);

// The outcome of a completed SG_IO (sg_io_hdr's status, host_status, driver_status and the sense
// data it wrote).
ScsiOutcome OutcomeOf(uint8_t status, uint16_t host_status, uint16_t driver_status,
                      std::span<const uint8_t> sense);

// OK for GOOD; FailedPrecondition for RESERVATION CONFLICT; Unimplemented for ILLEGAL REQUEST;
// Unavailable otherwise (the path is down, the disk is gone): `what` names the command.
absl::Status OutcomeStatus(const std::string& what, const ScsiOutcome& outcome);

// The 24-byte parameter list of PERSISTENT RESERVE OUT (basic, no flags).
std::vector<uint8_t> ReserveOutParameters(uint64_t key, uint64_t service_key);

// Parses READ KEYS' answer into `r` (generation and keys). Returns the keys the target has,
// which may be more than `answer` holds (then ask again with room for all).
absl::StatusOr<uint32_t> ParseReadKeys(std::span<const uint8_t> answer, iscsi::Reservations* r);

// Parses READ RESERVATION's answer into `r` (holder and type).
absl::Status ParseReadReservation(std::span<const uint8_t> answer, iscsi::Reservations* r);

// The commands on one disk, through an open descriptor of its device node.
class DiskReservations : public iscsi::ReservationChannel {
 public:
  // Opens `device` ("/dev/sdb"). NotFound when it is gone.
  static absl::StatusOr<std::unique_ptr<DiskReservations>> Open(const std::string& device);

  absl::StatusOr<iscsi::Reservations> ReadReservations() override;
  absl::Status ReserveOut(iscsi::ReserveAction action, uint64_t key, uint64_t service_key,
                          uint8_t type) override;

 private:
  DiskReservations(std::string device, UniqueFd fd)
      : device_(std::move(device)), fd_(std::move(fd)) {}

  // Sends `cdb` with `data` (in or out), past up to three unit attentions.
  absl::StatusOr<ScsiOutcome> Send(std::span<const uint8_t> cdb, std::span<uint8_t> data,
                                   bool to_device);

  std::string device_;
  UniqueFd fd_;
};

}  // namespace stagehand::transport::kernel

#include "transport/kernel/disk_reservations.h"

#include <fcntl.h>
#include <scsi/sg.h>
#include <sys/ioctl.h>

#include <array>
#include <cerrno>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

namespace stagehand::transport::kernel {
namespace {

constexpr uint8_t kPersistentReserveIn = 0x5e;
constexpr uint8_t kPersistentReserveOut = 0x5f;
constexpr uint8_t kReadKeys = 0x00;
constexpr uint8_t kReadReservation = 0x01;

constexpr uint8_t kStatusGood = 0x00;
constexpr uint8_t kStatusCheckCondition = 0x02;
constexpr uint8_t kStatusReservationConflict = 0x18;
constexpr uint8_t kSenseIllegalRequest = 0x05;
constexpr uint8_t kSenseUnitAttention = 0x06;

constexpr unsigned kTimeoutMs = 30'000;
// READ KEYS answers 8 bytes of header and 8 per key; room for this many keys first.
constexpr uint32_t kFirstKeys = 32;
constexpr uint32_t kMaxAllocation = 0xfff8;

uint32_t Be32(std::span<const uint8_t> b, size_t at) {
  return static_cast<uint32_t>(b[at]) << 24 | static_cast<uint32_t>(b[at + 1]) << 16 |
         static_cast<uint32_t>(b[at + 2]) << 8 | static_cast<uint32_t>(b[at + 3]);
}

uint64_t Be64(std::span<const uint8_t> b, size_t at) {
  return static_cast<uint64_t>(Be32(b, at)) << 32 | Be32(b, at + 4);
}

void PutBe64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    b[at + i] = static_cast<uint8_t>(v >> (56 - 8 * i));
  }
}

uint8_t ServiceAction(iscsi::ReserveAction action) {
  switch (action) {
    case iscsi::ReserveAction::kRegister:
      return 0x00;
    case iscsi::ReserveAction::kReserve:
      return 0x01;
    case iscsi::ReserveAction::kRelease:
      return 0x02;
    case iscsi::ReserveAction::kPreempt:
      return 0x04;
    case iscsi::ReserveAction::kRegisterAndIgnoreExistingKey:
      return 0x06;
  }
  return 0x00;
}

const char* ActionName(iscsi::ReserveAction action) {
  switch (action) {
    case iscsi::ReserveAction::kRegister:
      return "REGISTER";
    case iscsi::ReserveAction::kRegisterAndIgnoreExistingKey:
      return "REGISTER AND IGNORE EXISTING KEY";
    case iscsi::ReserveAction::kReserve:
      return "RESERVE";
    case iscsi::ReserveAction::kRelease:
      return "RELEASE";
    case iscsi::ReserveAction::kPreempt:
      return "PREEMPT";
  }
  return "?";
}

}  // namespace

void ReadSense(std::span<const uint8_t> sense, ScsiOutcome* out) {
  if (sense.empty()) {
    return;
  }
  const uint8_t code = sense[0] & 0x7f;
  if ((code == 0x72 || code == 0x73) && sense.size() >= 4) {
    out->sense_key = sense[1] & 0x0f;
    out->asc = sense[2];
    out->ascq = sense[3];
  } else if ((code == 0x70 || code == 0x71) && sense.size() >= 3) {
    out->sense_key = sense[2] & 0x0f;
    out->asc = sense.size() > 12 ? sense[12] : 0;
    out->ascq = sense.size() > 13 ? sense[13] : 0;
  }
}

ScsiOutcome OutcomeOf(uint8_t status, uint16_t host_status, uint16_t driver_status,
                      std::span<const uint8_t> sense) {
  // The low nibble of driver_status is a code, and DRIVER_SENSE (8) only says that sense data
  // came with the status (the kernel sets it with every CHECK CONDITION).
  constexpr uint16_t kDriverSense = 0x08;
  const uint16_t driver = driver_status & 0x0f;
  ScsiOutcome out;
  out.status = status;
  out.transport_failed = host_status != 0 || (driver != 0 && driver != kDriverSense);
  ReadSense(sense, &out);
  return out;
}

absl::Status OutcomeStatus(const std::string& what, const ScsiOutcome& outcome) {
  if (outcome.transport_failed) {
    return absl::UnavailableError(
        absl::StrCat(what, ": the command did not reach the target (the path is down)"));
  }
  switch (outcome.status) {
    case kStatusGood:
      return absl::OkStatus();
    case kStatusReservationConflict:
      return absl::FailedPreconditionError(absl::StrCat(what, ": RESERVATION CONFLICT"));
    case kStatusCheckCondition:
      if (outcome.sense_key == kSenseIllegalRequest) {
        return absl::UnimplementedError(absl::StrFormat(
            "%s: the target does not support it (ILLEGAL REQUEST, ASC 0x%02x ASCQ 0x%02x)", what,
            outcome.asc, outcome.ascq));
      }
      return absl::UnavailableError(
          absl::StrFormat("%s: CHECK CONDITION (sense key 0x%x, ASC 0x%02x ASCQ 0x%02x)", what,
                          outcome.sense_key, outcome.asc, outcome.ascq));
    default:
      return absl::UnavailableError(
          absl::StrFormat("%s: SCSI status 0x%02x", what, static_cast<unsigned>(outcome.status)));
  }
}

std::vector<uint8_t> ReserveOutParameters(uint64_t key, uint64_t service_key) {
  std::vector<uint8_t> p(24, 0);
  PutBe64(p, 0, key);
  PutBe64(p, 8, service_key);
  return p;
}

absl::StatusOr<uint32_t> ParseReadKeys(std::span<const uint8_t> answer, iscsi::Reservations* r) {
  if (answer.size() < 8) {
    return absl::DataLossError("READ KEYS: an answer shorter than its header");
  }
  r->generation = Be32(answer, 0);
  const uint32_t listed = Be32(answer, 4) / 8;  // At most 2^29: 8 + 8 * listed fits 64 bits.
  const size_t here = std::min<size_t>(listed, (answer.size() - 8) / 8);
  r->keys.clear();
  for (size_t i = 0; i < here; ++i) {
    r->keys.push_back(Be64(answer, 8 + 8 * i));
  }
  return listed;
}

absl::Status ParseReadReservation(std::span<const uint8_t> answer, iscsi::Reservations* r) {
  if (answer.size() < 8) {
    return absl::DataLossError("READ RESERVATION: an answer shorter than its header");
  }
  r->holder.reset();
  r->type = 0;
  if (Be32(answer, 4) == 0) {
    return absl::OkStatus();  // Not reserved.
  }
  if (answer.size() < 22) {
    return absl::DataLossError("READ RESERVATION: a reservation descriptor cut short");
  }
  r->holder = Be64(answer, 8);
  r->type = answer[21] & 0x0f;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DiskReservations>> DiskReservations::Open(
    const std::string& device) {
  // SG_IO wants no more than a read-only open; O_NONBLOCK: never wait for the medium.
  UniqueFd fd(::open(device.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    if (err == ENOENT || err == ENXIO || err == ENODEV) {
      return absl::NotFoundError(absl::StrCat(device, " is gone"));
    }
    return ErrnoStatus(err, absl::StrCat("open ", device));
  }
  return std::unique_ptr<DiskReservations>(new DiskReservations(device, std::move(fd)));
}

absl::StatusOr<ScsiOutcome> DiskReservations::Send(std::span<const uint8_t> cdb,
                                                   std::span<uint8_t> data, bool to_device) {
  constexpr int kAttempts = 4;
  ScsiOutcome out;
  for (int i = 0; i < kAttempts; ++i) {
    std::array<uint8_t, 64> sense{};
    std::vector<uint8_t> command(cdb.begin(), cdb.end());
    sg_io_hdr_t hdr{};
    hdr.interface_id = 'S';
    hdr.dxfer_direction = data.empty() ? SG_DXFER_NONE
                          : to_device  ? SG_DXFER_TO_DEV
                                       : SG_DXFER_FROM_DEV;
    hdr.cmd_len = static_cast<unsigned char>(command.size());
    hdr.cmdp = command.data();
    hdr.dxfer_len = static_cast<unsigned>(data.size());
    hdr.dxferp = data.data();
    hdr.mx_sb_len = static_cast<unsigned char>(sense.size());
    hdr.sbp = sense.data();
    hdr.timeout = kTimeoutMs;
    if (::ioctl(fd_.Get(), SG_IO, &hdr) != 0) {
      return ErrnoStatus(errno, absl::StrCat("SG_IO to ", device_));
    }
    out = OutcomeOf(hdr.status, hdr.host_status, hdr.driver_status,
                    std::span<const uint8_t>(sense.data(), hdr.sb_len_wr));
    if (out.transport_failed || out.status != kStatusCheckCondition ||
        out.sense_key != kSenseUnitAttention) {
      break;
    }
  }
  return out;
}

absl::StatusOr<iscsi::Reservations> DiskReservations::ReadReservations() {
  iscsi::Reservations r;
  uint32_t length = 8 + 8 * kFirstKeys;
  while (true) {
    const std::string what = absl::StrCat("PERSISTENT RESERVE IN (READ KEYS) of ", device_);
    std::vector<uint8_t> answer(length, 0);
    const std::array<uint8_t, 10> cdb = {
        kPersistentReserveIn,         kReadKeys, 0, 0, 0, 0, 0, static_cast<uint8_t>(length >> 8),
        static_cast<uint8_t>(length), 0};
    SH_ASSIGN_OR_RETURN(const ScsiOutcome sent, Send(cdb, answer, /*to_device=*/false));
    SH_RETURN_IF_ERROR(OutcomeStatus(what, sent));
    SH_ASSIGN_OR_RETURN(const uint32_t listed, ParseReadKeys(answer, &r));
    if (listed > r.keys.size() && length < kMaxAllocation) {
      length = static_cast<uint32_t>(
          std::min<uint64_t>(8 + 8 * static_cast<uint64_t>(listed), kMaxAllocation));
      continue;  // More keys than fit: ask again with room for all.
    }
    if (listed > r.keys.size()) {
      // A preemption that missed some would leave their nexuses able to write.
      return absl::ResourceExhaustedError(absl::StrCat(
          what, ": the LUN has ", listed, " registrations, more than one answer can list"));
    }
    break;
  }
  const std::string what = absl::StrCat("PERSISTENT RESERVE IN (READ RESERVATION) of ", device_);
  std::vector<uint8_t> answer(24, 0);
  const std::array<uint8_t, 10> cdb = {kPersistentReserveIn,
                                       kReadReservation,
                                       0,
                                       0,
                                       0,
                                       0,
                                       0,
                                       0,
                                       static_cast<uint8_t>(answer.size()),
                                       0};
  SH_ASSIGN_OR_RETURN(const ScsiOutcome sent, Send(cdb, answer, /*to_device=*/false));
  SH_RETURN_IF_ERROR(OutcomeStatus(what, sent));
  SH_RETURN_IF_ERROR(ParseReadReservation(answer, &r));
  return r;
}

absl::Status DiskReservations::ReserveOut(iscsi::ReserveAction action, uint64_t key,
                                          uint64_t service_key, uint8_t type) {
  const std::string what =
      absl::StrCat("PERSISTENT RESERVE OUT (", ActionName(action), ") of ", device_);
  std::vector<uint8_t> params = ReserveOutParameters(key, service_key);
  // Scope LU (0) in the upper nibble, the type in the lower.
  const std::array<uint8_t, 10> cdb = {kPersistentReserveOut,
                                       ServiceAction(action),
                                       static_cast<uint8_t>(type & 0x0f),
                                       0,
                                       0,
                                       0,
                                       0,
                                       0,
                                       static_cast<uint8_t>(params.size()),
                                       0};
  SH_ASSIGN_OR_RETURN(const ScsiOutcome sent, Send(cdb, params, /*to_device=*/true));
  return OutcomeStatus(what, sent);
}

}  // namespace stagehand::transport::kernel

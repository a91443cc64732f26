#pragma once

// The identity of a logical unit (SCSI VPD pages 0x83 and 0x80) and the checks that keep
// stagehand from using the wrong LUN. Pure: parsing and comparison only.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace stagehand::iscsi {

struct LunIdentity {
  // Logical-unit designators from VPD 0x83, in page order: "naa.<hex>", "eui.<hex>",
  // "t10.<ascii>", "name.<scsi name>".
  std::vector<std::string> designators;
  std::string serial;  // VPD 0x80, trimmed. May be empty.
  std::string vendor;
  std::string product;

  bool Empty() const { return designators.empty() && serial.empty(); }

  bool operator==(const LunIdentity&) const = default;
};

// Parses a VPD 0x83 (Device Identification) page. Only designators associated with the
// logical unit are kept (association 0). InvalidArgument if the page is truncated.
absl::StatusOr<std::vector<std::string>> ParseDeviceIdentificationPage(
    std::span<const uint8_t> page);

// Parses a VPD 0x80 (Unit Serial Number) page; returns the trimmed serial.
absl::StatusOr<std::string> ParseUnitSerialPage(std::span<const uint8_t> page);

// How a target answered an INQUIRY for an optional VPD page (0x83 and 0x80 are optional in SPC).
enum class VpdAnswer {
  kData,         // GOOD: the page is there.
  kUnsupported,  // CHECK CONDITION, ILLEGAL REQUEST, INVALID FIELD IN CDB: no such page.
  kError,        // Anything else (no answer, a dropped connection, another status or sense):
                 // nothing is known about the page, so the identity was not read.
};

// `answered`: a SCSI status came back at all; `scsi_status`, `sense_key` and `asc_ascq`
// (ASC << 8 | ASCQ) as libiscsi reports them. Another ILLEGAL REQUEST (LOGICAL UNIT NOT
// SUPPORTED while a LUN is being re-created) is an error, not a missing page. Pure.
VpdAnswer ClassifyVpdAnswer(bool answered, int scsi_status, int sense_key, int asc_ascq);

// True for a UNIT ATTENTION after which the logical unit may not be the one it was: its
// `asc_ascq` (ASC << 8 | ASCQ, as libiscsi reports it) is 3F/xx (inquiry data, LUN inventory,
// operating definition changed), 29/xx (power on, reset, nexus loss) or 2A/09 (capacity data
// changed). No command may go to the LUN before its identity was read again. Pure.
bool UnitAttentionMayChangeTheLun(int asc_ascq);

// The first NAA or EUI designator as bare lower-case hex, or "" if there is none.
std::string PrimaryWwn(const LunIdentity& id);

// Checks `actual` against the values the volume context asked for.
// FailedPrecondition (fail closed) when `expected_wwn` (normalised hex) is not among the NAA/EUI
// designators or `expected_serial` differs from the unit serial, or when an expectation is set
// and the LUN reports no identity at all.
absl::Status CheckExpectedIdentity(const LunIdentity& actual, std::string_view expected_wwn,
                                   std::string_view expected_serial);

// Checks that `now` is the same LUN as `before` (after a reconnect or on adoption).
// FailedPrecondition naming both identities when they differ. A LUN that reported no identity
// before compares equal only to one that reports none now.
absl::Status CheckSameLun(const LunIdentity& before, const LunIdentity& now);

// "naa.6001…, serial 'beaf11'" for messages and logs.
std::string DescribeIdentity(const LunIdentity& id);

}  // namespace stagehand::iscsi

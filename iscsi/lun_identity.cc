#include "iscsi/lun_identity.h"

#include <algorithm>

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

namespace stagehand::iscsi {
namespace {

std::string Hex(std::span<const uint8_t> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xf]);
  }
  return out;
}

std::string Printable(std::span<const uint8_t> bytes) {
  std::string out;
  for (uint8_t b : bytes) {
    if (b == 0) {
      break;
    }
    out.push_back((b >= 0x20 && b < 0x7f) ? static_cast<char>(b) : '?');
  }
  return std::string(absl::StripAsciiWhitespace(out));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseDeviceIdentificationPage(
    std::span<const uint8_t> page) {
  if (page.size() < 4 || page[1] != 0x83) {
    return absl::InvalidArgumentError("not a VPD 0x83 page");
  }
  const size_t length = (size_t{page[2]} << 8) | page[3];
  if (page.size() < 4 + length) {
    return absl::InvalidArgumentError("truncated VPD 0x83 page");
  }
  std::vector<std::string> out;
  size_t off = 4;
  while (off + 4 <= 4 + length) {
    const uint8_t code_set = page[off] & 0x0f;
    const uint8_t association = (page[off + 1] >> 4) & 0x03;
    const uint8_t type = page[off + 1] & 0x0f;
    const size_t len = page[off + 3];
    if (off + 4 + len > 4 + length) {
      return absl::InvalidArgumentError("truncated designator in VPD 0x83 page");
    }
    auto value = page.subspan(off + 4, len);
    off += 4 + len;
    if (association != 0 || value.empty()) {
      continue;
    }
    switch (type) {
      case 1:  // T10 vendor ID based.
        out.push_back(absl::StrCat("t10.", code_set == 1 ? Hex(value) : Printable(value)));
        break;
      case 2:  // EUI-64 based.
        out.push_back(absl::StrCat("eui.", Hex(value)));
        break;
      case 3:  // NAA.
        out.push_back(absl::StrCat("naa.", Hex(value)));
        break;
      case 8:  // SCSI name string.
        out.push_back(absl::StrCat("name.", Printable(value)));
        break;
      default:
        break;
    }
  }
  return out;
}

absl::StatusOr<std::string> ParseUnitSerialPage(std::span<const uint8_t> page) {
  if (page.size() < 4 || page[1] != 0x80) {
    return absl::InvalidArgumentError("not a VPD 0x80 page");
  }
  const size_t length = (size_t{page[2]} << 8) | page[3];
  if (page.size() < 4 + length) {
    return absl::InvalidArgumentError("truncated VPD 0x80 page");
  }
  return Printable(page.subspan(4, length));
}

std::string PrimaryWwn(const LunIdentity& id) {
  for (const auto& d : id.designators) {
    if (d.starts_with("naa.") || d.starts_with("eui.")) {
      return d.substr(4);
    }
  }
  return "";
}

absl::Status CheckExpectedIdentity(const LunIdentity& actual, std::string_view expected_wwn,
                                   std::string_view expected_serial) {
  if (!expected_wwn.empty()) {
    const bool found = std::any_of(actual.designators.begin(), actual.designators.end(),
                                   [&](const std::string& d) {
                                     return (d.starts_with("naa.") || d.starts_with("eui.")) &&
                                            std::string_view(d).substr(4) == expected_wwn;
                                   });
    if (!found) {
      return absl::FailedPreconditionError(absl::StrCat(
          "LUN identity mismatch: expectedWWN is '", ToAbsl(expected_wwn), "' but the LUN reports ",
          DescribeIdentity(actual), "; refusing to use it (check the target, iqn and lun)"));
    }
  }
  if (!expected_serial.empty() && actual.serial != expected_serial) {
    return absl::FailedPreconditionError(
        absl::StrCat("LUN identity mismatch: expectedSerial is '", ToAbsl(expected_serial),
                     "' but the LUN reports ", DescribeIdentity(actual),
                     "; refusing to use it (check the target, iqn and lun)"));
  }
  return absl::OkStatus();
}

absl::Status CheckSameLun(const LunIdentity& before, const LunIdentity& now) {
  if (before.designators == now.designators && before.serial == now.serial) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("LUN identity changed: was ", DescribeIdentity(before), ", now ",
                   DescribeIdentity(now), "; refusing I/O to a different LUN"));
}

std::string DescribeIdentity(const LunIdentity& id) {
  if (id.Empty()) {
    return "no identity";
  }
  std::string out = id.designators.empty() ? "no designators" : absl::StrJoin(id.designators, ", ");
  if (!id.serial.empty()) {
    absl::StrAppend(&out, ", serial '", id.serial, "'");
  }
  return out;
}

VpdAnswer ClassifyVpdAnswer(bool answered, int scsi_status, int sense_key, int asc_ascq) {
  constexpr int kStatusGood = 0x00;            // SCSI_STATUS_GOOD
  constexpr int kStatusCheckCondition = 0x02;  // SCSI_STATUS_CHECK_CONDITION
  constexpr int kSenseIllegalRequest = 0x05;   // SCSI_SENSE_ILLEGAL_REQUEST
  if (!answered) {
    return VpdAnswer::kError;
  }
  if (scsi_status == kStatusGood) {
    return VpdAnswer::kData;
  }
  constexpr int kAscInvalidFieldInCdb = 0x24;
  if (scsi_status == kStatusCheckCondition && sense_key == kSenseIllegalRequest &&
      ((asc_ascq >> 8) & 0xff) == kAscInvalidFieldInCdb) {
    return VpdAnswer::kUnsupported;
  }
  return VpdAnswer::kError;
}

bool UnitAttentionMayChangeTheLun(int asc_ascq) {
  const int asc = (asc_ascq >> 8) & 0xff;
  return asc == 0x3f || asc == 0x29 || asc_ascq == 0x2a09;
}

}  // namespace stagehand::iscsi

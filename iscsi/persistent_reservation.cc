#include "iscsi/persistent_reservation.h"

#include <algorithm>
#include <random>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include "base/sha256.h"

namespace stagehand::iscsi {

uint32_t NodeKeyPrefix(std::string_view node_id) {
  const std::string digest = Sha256Hex(node_id);
  uint32_t prefix = 0;
  for (char c : digest.substr(0, 8)) {
    prefix = prefix << 4 | static_cast<uint32_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  // A key of 0 means "no key" in PERSISTENT RESERVE OUT; a prefix of 0 would allow it.
  return prefix != 0 ? prefix : 1;
}

uint64_t NodeKey(std::string_view node_id, uint32_t rotation) {
  return static_cast<uint64_t>(NodeKeyPrefix(node_id)) << 32 | rotation;
}

bool IsNodeKey(uint64_t key, std::string_view node_id) {
  return key >> 32 == NodeKeyPrefix(node_id);
}

uint64_t FreshKey(uint64_t node_key, const std::vector<uint64_t>& taken) {
  std::random_device random;
  while (true) {
    const uint64_t key = (node_key & 0xffffffff00000000ULL) | random();
    if (std::find(taken.begin(), taken.end(), key) == taken.end()) {
      return key;
    }
  }
}

std::string FormatKey(uint64_t key) {
  return absl::StrFormat("0x%016x", key);
}

std::string ReservationTypeName(uint8_t type) {
  switch (type) {
    case 1:
      return "Write Exclusive";
    case 3:
      return "Exclusive Access";
    case 5:
      return "Write Exclusive - Registrants Only";
    case 6:
      return "Exclusive Access - Registrants Only";
    case 7:
      return "Write Exclusive - All Registrants";
    case 8:
      return "Exclusive Access - All Registrants";
    default:
      return absl::StrCat("type ", type);
  }
}

}  // namespace stagehand::iscsi

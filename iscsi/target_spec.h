#pragma once

// What NodeStageVolume's volume_context and secrets say about an iSCSI target, parsed and
// validated. Pure: no I/O.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "base/status.h"

namespace stagehand::iscsi {

struct Portal {
  std::string host;  // IPv4 address, hostname, or IPv6 address without brackets.
  uint16_t port = 3260;

  // "host:port", with brackets around IPv6 addresses (libiscsi's portal syntax).
  std::string ToString() const;
  bool operator==(const Portal&) const = default;
};

struct ChapCredentials {
  std::string user;
  std::string secret;
  std::string user_in;    // Mutual CHAP: the target's name; empty when one-way.
  std::string secret_in;  // Mutual CHAP: the target's secret.
};

struct TargetSpec {
  std::vector<Portal> portals;  // targetPortal first, then `portals`, without duplicates.
  std::string iqn;
  uint32_t lun = 0;
  std::string expected_wwn;     // Normalised: lower-case hex digits, no prefix. Empty: unchecked.
  std::string expected_serial;  // Empty: unchecked.
  std::optional<ChapCredentials> session_chap;
  std::optional<ChapCredentials> discovery_chap;
  // `replacementTimeout` in seconds (1..86400); unset: the node's default.
  std::optional<uint32_t> replacement_timeout_seconds;
  // `takeoverAfter`: seconds (3..86400) another node waits for a dead holder of this volume's
  // reservation (its key unchanged) before it preempts it; 0 for "off": never automatically,
  // and a target without persistent reservations stages the volume without one. Unset: the
  // node's default.
  std::optional<uint32_t> takeover_after_seconds;
};

// The smallest takeover time: three renewal periods of a second.
inline constexpr uint32_t kMinTakeoverAfterSeconds = 3;

// "off" -> 0, "30" -> 30; InvalidArgument naming `what` otherwise (below
// kMinTakeoverAfterSeconds, above a day, not a number).
absl::StatusOr<uint32_t> ParseTakeoverAfter(const std::string& text, const std::string& what);

// Volume-context keys.
inline constexpr char kTargetPortalKey[] = "targetPortal";
inline constexpr char kPortalsKey[] = "portals";
inline constexpr char kIqnKey[] = "iqn";
inline constexpr char kLunKey[] = "lun";
inline constexpr char kExpectedWwnKey[] = "expectedWWN";
inline constexpr char kExpectedSerialKey[] = "expectedSerial";
inline constexpr char kReplacementTimeoutKey[] = "replacementTimeout";
inline constexpr char kTakeoverAfterKey[] = "takeoverAfter";

// Parses "host", "host:port", "[v6]" or "[v6]:port". InvalidArgument with a message that names
// the bad value otherwise.
absl::StatusOr<Portal> ParsePortal(std::string_view text);

// True when both name the same IP address (textual forms may differ for IPv6). Host names are
// compared as text.
bool SameAddress(std::string_view a, std::string_view b);

// True for "iqn.YYYY-MM.reversed.domain[:anything]", "eui.<16 hex>" and "naa.<16 or 32 hex>".
bool IsValidTargetName(std::string_view name);

// Normalises a WWN as people write it ("naa.6001405ab...", "0x6001405AB...", "6001405ab...")
// to lower-case hex. InvalidArgument if what remains is not 16 or 32 hex digits.
absl::StatusOr<std::string> NormaliseWwn(std::string_view text);

// Builds a TargetSpec. InvalidArgument (naming the key and what to fix) for a missing
// targetPortal or iqn, a malformed portal, iqn, lun or expectedWWN, or incomplete CHAP secrets
// (a user without a password or the reverse). Secret values never appear in messages.
absl::StatusOr<TargetSpec> ParseTargetSpec(const std::map<std::string, std::string>& context,
                                           const std::map<std::string, std::string>& secrets);

}  // namespace stagehand::iscsi

// Never prints secrets.
template <>
struct fmt::formatter<stagehand::iscsi::ChapCredentials> : fmt::formatter<std::string_view> {
  template <typename Ctx>
  auto format(const stagehand::iscsi::ChapCredentials& c, Ctx& ctx) const {
    return fmt::format_to(ctx.out(), "user={} secret=<redacted>{}", c.user,
                          c.user_in.empty() ? "" : " mutual=yes");
  }
};

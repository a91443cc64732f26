#include "iscsi/target_spec.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstring>

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

namespace stagehand::iscsi {
namespace {

bool IsHex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(c); });
}

absl::StatusOr<uint32_t> ParseUint(std::string_view text, uint32_t max, std::string_view what) {
  uint32_t value = 0;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToAbsl(what), " '", ToAbsl(text), "' is not a number from 0 to ", max));
  }
  return value;
}

std::optional<std::string> Lookup(const std::map<std::string, std::string>& m,
                                  const std::string& key) {
  auto it = m.find(key);
  if (it == m.end() || it->second.empty()) {
    return std::nullopt;
  }
  return it->second;
}

absl::StatusOr<std::optional<ChapCredentials>> ParseChap(
    const std::map<std::string, std::string>& secrets, const std::string& prefix) {
  auto user = Lookup(secrets, prefix + ".username");
  auto secret = Lookup(secrets, prefix + ".password");
  auto user_in = Lookup(secrets, prefix + ".username_in");
  auto secret_in = Lookup(secrets, prefix + ".password_in");
  if (!user && !secret && !user_in && !secret_in) {
    return std::nullopt;
  }
  if (!user || !secret) {
    return absl::InvalidArgumentError(
        absl::StrCat("CHAP secrets need both '", prefix, ".username' and '", prefix, ".password'"));
  }
  if (static_cast<bool>(user_in) != static_cast<bool>(secret_in)) {
    return absl::InvalidArgumentError(absl::StrCat("mutual CHAP needs both '", prefix,
                                                   ".username_in' and '", prefix, ".password_in'"));
  }
  for (const char* key : {".username", ".password", ".username_in", ".password_in"}) {
    auto value = Lookup(secrets, prefix + key);
    if (value && std::any_of(value->begin(), value->end(),
                             [](char ch) { return ch == '\n' || ch == '\r' || ch == '\0'; })) {
      // Never echo the value: it may be a secret.
      return absl::InvalidArgumentError(absl::StrCat(
          "CHAP secret '", prefix, key, "' contains a line break or NUL character; remove it"));
    }
  }
  ChapCredentials c;
  c.user = *user;
  c.secret = *secret;
  c.user_in = user_in.value_or("");
  c.secret_in = secret_in.value_or("");
  return c;
}

}  // namespace

std::string Portal::ToString() const {
  if (absl::StrContains(host, ':')) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

namespace {

// An IPv4 address in any numbers-and-dots form that name resolution accepts ("127.1" is
// 127.0.0.1: another spelling of a portal is caught by the LUN's identity, not here), or a DNS
// host name: labels of letters, digits, '-' (not first or last) and '_' (seen in internal
// names), 1 to 63 bytes each, 253 in all.
bool IsHostName(const std::string& host) {
  in_addr v4{};
  const bool numeric = std::all_of(host.begin(), host.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'x' || c == 'X';
  });  // inet_aton would also take "1.2.3.4 anything".
  if (numeric && ::inet_aton(host.c_str(), &v4) != 0) {
    return true;
  }
  if (host.size() > 253) {
    return false;
  }
  for (absl::string_view label : absl::StrSplit(host, '.')) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') {
        return false;
      }
    }
  }
  // All digits and dots, but not an IPv4 address ("10.0.0.256"): a typo, not a name.
  return !std::all_of(host.begin(), host.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == '.';
  });
}

}  // namespace

absl::StatusOr<Portal> ParsePortal(std::string_view text) {
  const std::string shown(text);
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("portal '", shown, "' ", ToAbsl(why),
                                                   "; expected host[:port] or [ipv6][:port]"));
  };
  text = ToStd(absl::StripAsciiWhitespace(ToAbsl(text)));
  if (text.empty()) {
    return bad("is empty");
  }
  Portal p;
  std::string_view port_text;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return bad("has no closing ']'");
    }
    p.host = std::string(text.substr(1, close - 1));
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') {
        return bad("has text after ']' that is not ':port'");
      }
      port_text = rest.substr(1);
      if (port_text.empty()) {
        return bad("has an empty port");
      }
    }
    // An IPv6 address, parsed (not pattern-matched), with an optional zone ("fe80::1%eth0").
    const size_t percent = p.host.find('%');
    const bool has_zone = percent != std::string::npos;
    const std::string address = p.host.substr(0, percent);
    const std::string zone = has_zone ? p.host.substr(percent + 1) : "";
    in6_addr parsed{};
    if (address.empty() || ::inet_pton(AF_INET6, address.c_str(), &parsed) != 1) {
      return bad("has brackets around something that is not an IPv6 address");
    }
    if (has_zone &&
        (zone.empty() || zone.size() > 15 || !std::all_of(zone.begin(), zone.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
         }))) {
      return bad("has an IPv6 zone that is not an interface name");
    }
  } else {
    const size_t colon = text.find(':');
    if (colon != std::string_view::npos && text.find(':', colon + 1) != std::string_view::npos) {
      return bad("looks like an IPv6 address without brackets");
    }
    p.host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = text.substr(colon + 1);
      if (port_text.empty()) {
        return bad("has an empty port");
      }
    }
  }
  if (p.host.empty()) {
    return bad("has an empty host");
  }
  if (text.front() != '[' && !IsHostName(p.host)) {
    return bad("has a host that is neither an IPv4 address nor a host name");
  }
  if (!port_text.empty()) {
    auto port = ParseUint(port_text, 65535, "port");
    if (!port.ok() || *port == 0) {
      return bad("has a port that is not a number from 1 to 65535");
    }
    p.port = static_cast<uint16_t>(*port);
  }
  // "[::ffff:10.0.0.5]" is the IPv4 address 10.0.0.5: name it so, for open-iscsi (whose node
  // records would not be found under the mapped form) and for comparing portals.
  in6_addr v6{};
  if (::inet_pton(AF_INET6, p.host.c_str(), &v6) == 1 && IN6_IS_ADDR_V4MAPPED(&v6)) {
    std::array<char, INET_ADDRSTRLEN> v4{};
    if (::inet_ntop(AF_INET, &v6.s6_addr[12], v4.data(), v4.size()) != nullptr) {
      p.host = v4.data();
    }
  }
  return p;
}

bool IsValidTargetName(std::string_view name) {
  if (name.size() > 223) {
    return false;
  }
  for (char c : name) {
    if (std::isspace(static_cast<unsigned char>(c)) ||
        std::iscntrl(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  if (name.starts_with("iqn.")) {
    // iqn.YYYY-MM.<reversed domain>[:<unique>]
    std::string_view rest = name.substr(4);
    if (rest.size() < 9 || rest[4] != '-' || rest[7] != '.') {
      return false;
    }
    for (size_t i : {0, 1, 2, 3, 5, 6}) {
      if (!std::isdigit(static_cast<unsigned char>(rest[i]))) {
        return false;
      }
    }
    return rest.size() > 8 && rest[8] != ':' && rest[8] != '.';
  }
  if (name.starts_with("eui.")) {
    return name.size() == 20 && IsHex(name.substr(4));
  }
  if (name.starts_with("naa.")) {
    return (name.size() == 20 || name.size() == 36) && IsHex(name.substr(4));
  }
  return false;
}

absl::StatusOr<std::string> NormaliseWwn(std::string_view text) {
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(ToAbsl(text)));
  std::string_view v = s;
  for (std::string_view prefix : {"naa.", "eui.", "wwn-0x", "0x"}) {
    if (v.starts_with(prefix)) {
      v.remove_prefix(prefix.size());
      break;
    }
  }
  if (!IsHex(v) || (v.size() != 16 && v.size() != 32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expectedWWN '", ToAbsl(text),
        "' is not a WWN; give 16 or 32 hex digits, optionally prefixed with 'naa.' or '0x'"));
  }
  return std::string(v);
}

absl::StatusOr<TargetSpec> ParseTargetSpec(const std::map<std::string, std::string>& context,
                                           const std::map<std::string, std::string>& secrets) {
  TargetSpec spec;
  auto portal_text = Lookup(context, kTargetPortalKey);
  if (!portal_text) {
    return absl::InvalidArgumentError(
        "volume_context is missing 'targetPortal' (the target's host[:port])");
  }
  SH_ASSIGN_OR_RETURN(Portal first, ParsePortal(*portal_text));
  spec.portals.push_back(first);
  if (auto extra = Lookup(context, kPortalsKey)) {
    for (absl::string_view part : absl::StrSplit(*extra, ',', absl::SkipWhitespace())) {
      auto p = ParsePortal(ToStd(part));
      if (!p.ok()) {
        return WithContext(p.status(), "volume_context 'portals'");
      }
      if (std::find(spec.portals.begin(), spec.portals.end(), *p) == spec.portals.end()) {
        spec.portals.push_back(*p);
      }
    }
  }
  auto iqn = Lookup(context, kIqnKey);
  if (!iqn) {
    return absl::InvalidArgumentError("volume_context is missing 'iqn' (the target's name)");
  }
  if (!IsValidTargetName(*iqn)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'iqn' value '", *iqn,
        "' is not an iSCSI name; expected iqn.YYYY-MM.domain[:id], eui.<16 hex> or naa.<hex>"));
  }
  spec.iqn = *iqn;
  if (auto lun = Lookup(context, kLunKey)) {
    auto parsed = ParseUint(*lun, 16383, "'lun'");
    if (!parsed.ok()) {
      return parsed.status();
    }
    spec.lun = *parsed;
  }
  if (auto wwn = Lookup(context, kExpectedWwnKey)) {
    SH_ASSIGN_OR_RETURN(spec.expected_wwn, NormaliseWwn(*wwn));
  }
  if (auto serial = Lookup(context, kExpectedSerialKey)) {
    spec.expected_serial = std::string(absl::StripAsciiWhitespace(*serial));
  }
  if (auto timeout = Lookup(context, kReplacementTimeoutKey)) {
    SH_ASSIGN_OR_RETURN(uint32_t seconds, ParseUint(*timeout, 86400, "'replacementTimeout'"));
    if (seconds == 0) {
      return absl::InvalidArgumentError(
          "'replacementTimeout' must be at least 1 second (I/O would fail at the first blip)");
    }
    spec.replacement_timeout_seconds = seconds;
  }
  if (auto takeover = Lookup(context, kTakeoverAfterKey)) {
    SH_ASSIGN_OR_RETURN(spec.takeover_after_seconds,
                        ParseTakeoverAfter(*takeover, "'takeoverAfter'"));
  }
  SH_ASSIGN_OR_RETURN(spec.session_chap, ParseChap(secrets, "node.session.auth"));
  SH_ASSIGN_OR_RETURN(spec.discovery_chap, ParseChap(secrets, "node.sendtargets.auth"));
  return spec;
}

absl::StatusOr<uint32_t> ParseTakeoverAfter(const std::string& text, const std::string& what) {
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  if (trimmed == "off") {
    return 0;
  }
  uint32_t seconds = 0;
  if (!absl::SimpleAtoi(trimmed, &seconds) || seconds < kMinTakeoverAfterSeconds ||
      seconds > 86400) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is '", text, "': expected \"off\" or seconds from ", kMinTakeoverAfterSeconds,
        " to 86400 (a holder renews its key every third of it)"));
  }
  return seconds;
}

bool SameAddress(std::string_view a, std::string_view b) {
  if (a == b) {
    return true;
  }
  // Without an IPv6 zone ("fe80::1%eth0"): inet_pton rejects it, and sysfs may not show it.
  const std::string sa(a.substr(0, a.find('%')));
  const std::string sb(b.substr(0, b.find('%')));
  in6_addr x{}, y{};
  if (::inet_pton(AF_INET6, sa.c_str(), &x) == 1 && ::inet_pton(AF_INET6, sb.c_str(), &y) == 1) {
    return std::memcmp(&x, &y, sizeof x) == 0;
  }
  in_addr p{}, q{};
  if (::inet_pton(AF_INET, sa.c_str(), &p) == 1 && ::inet_pton(AF_INET, sb.c_str(), &q) == 1) {
    return p.s_addr == q.s_addr;
  }
  return false;
}

}  // namespace stagehand::iscsi

#pragma once

// Where stagehand's logs go: human text on a terminal (stderr), native journald fields when
// systemd captures stderr (JOURNAL_STREAM matches it), or one JSON object per line for shippers.

#include <string>

#include "base/status.h"

namespace stagehand::agent {

// `format`: "auto" (journald when run by systemd, else text), "text", "json" or "journal".
// `levels`: "info" or "info,reconciler=debug,..." (base/log.h). InvalidArgument when malformed.
absl::Status SetUpLogging(const std::string& format, const std::string& levels);

// `s` as the inside of a JSON string (quotes, backslashes and control characters escaped).
std::string JsonEscape(std::string_view s);

}  // namespace stagehand::agent

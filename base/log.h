#pragma once

// Per-component loggers. Each component ("reconciler", "registration", ...) logs through its own
// spdlog logger, named after it and sharing the default logger's sinks (so the output format is
// the same everywhere), with its own level: `--log-level info,reconciler=debug`.

#include <span>
#include <string_view>

#include <spdlog/logger.h>

#include "base/status.h"

namespace stagehand {

// The logger of `component`; created on first use with the level configured for it (or the
// global level). Never destroyed, so a reference may be cached.
spdlog::logger& ComponentLog(std::string_view component);

// The components stagehand logs from, for validation and --help.
std::span<const std::string_view> LogComponents();

// Applies "LEVEL" or "LEVEL,component=LEVEL,...": the first item (without '=') is the level of
// everything not named; levels are trace, debug, info, warn, error, critical, off.
// InvalidArgument, naming the bad part, for unknown levels or components.
absl::Status SetLogLevels(std::string_view spec);

// Validates a spec like SetLogLevels without applying it.
absl::Status CheckLogLevels(std::string_view spec);

// After the default logger was replaced: makes every component logger write to its sinks.
// Call before other threads log.
void RebindComponentLogs();

}  // namespace stagehand

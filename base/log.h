#pragma once

// Per-component loggers. Each component (LogComponent) logs through its own spdlog logger, named
// after it and sharing the default logger's sinks (so the output format is the same everywhere),
// with its own level: `--log-level info,reconciler=debug`. A file says once which component it
// logs as (`constexpr LogComponent kComponent = LogComponent::kCsi;`) and logs with
// `Log(kComponent).info(...)`: the set of names is checked by the compiler, and `--log-level`
// accepts exactly these.

#include <span>
#include <string_view>

#include <spdlog/logger.h>

#include "base/status.h"

namespace stagehand {

enum class LogComponent {
  kAgent,         // The daemon's start, stop and wiring.
  kCsi,           // The built-in driver's CSI calls.
  kManifests,     // The manifest directory.
  kMetrics,       // Metrics, stats and health rounds.
  kReconciler,    // The standalone reconciler.
  kRegistration,  // Plugin registration, both sides.
  kSessions,      // The data path: transports and session processes.
};

// "agent", "csi", ...: the component's name in log lines and in --log-level.
std::string_view LogComponentName(LogComponent component);

// The logger of `component`, with the level configured for it (or the global level). Cheap;
// never destroyed.
spdlog::logger& Log(LogComponent component);

// The names of every component, for validation and --help.
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

#include "base/log.h"

#include <array>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>
#include <spdlog/spdlog.h>

namespace stagehand {
namespace {

// In the order of LogComponent.
constexpr std::string_view kComponents[] = {"agent",      "csi",          "manifests", "metrics",
                                            "reconciler", "registration", "sessions"};
static_assert(std::size(kComponents) == static_cast<size_t>(LogComponent::kSessions) + 1);

struct Registry {
  std::mutex mu;
  spdlog::level::level_enum global = spdlog::level::info;
  std::map<std::string, spdlog::level::level_enum, std::less<>> levels;
  std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> loggers;
};

Registry& Get() {
  static auto* registry = new Registry();  // Never destroyed: loggers outlive static teardown.
  return *registry;
}

spdlog::level::level_enum LevelFor(const Registry& r, std::string_view component) {
  auto it = r.levels.find(component);
  return it == r.levels.end() ? r.global : it->second;
}

absl::StatusOr<spdlog::level::level_enum> ParseLevel(const std::string& text) {
  static const std::map<std::string, spdlog::level::level_enum, std::less<>> kLevels = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"critical", spdlog::level::critical},
      {"off", spdlog::level::off}};
  auto it = kLevels.find(text);
  if (it == kLevels.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown log level '", text, "' (use trace, debug, info, warn, error, critical or off)"));
  }
  return it->second;
}

spdlog::logger& CreateLogger(std::string_view component) {
  Registry& r = Get();
  std::lock_guard lock(r.mu);
  auto it = r.loggers.find(component);
  if (it == r.loggers.end()) {
    auto logger = spdlog::default_logger()->clone(std::string(component));
    logger->set_level(LevelFor(r, component));
    it = r.loggers.emplace(std::string(component), std::move(logger)).first;
  }
  return *it->second;
}

}  // namespace

std::string_view LogComponentName(LogComponent component) {
  return kComponents[static_cast<size_t>(component)];
}

spdlog::logger& Log(LogComponent component) {
  // Every component's logger, made once (thread-safe static initialization).
  static const std::array<spdlog::logger*, std::size(kComponents)> kLoggers = [] {
    std::array<spdlog::logger*, std::size(kComponents)> loggers{};
    for (size_t i = 0; i < loggers.size(); ++i) {
      loggers[i] = &CreateLogger(kComponents[i]);
    }
    return loggers;
  }();
  return *kLoggers[static_cast<size_t>(component)];
}

std::span<const std::string_view> LogComponents() {
  return kComponents;
}

struct ParsedLevels {
  std::optional<spdlog::level::level_enum> global;
  std::map<std::string, spdlog::level::level_enum, std::less<>> levels;
};

static absl::StatusOr<ParsedLevels> ParseLevels(std::string_view spec) {
  std::optional<spdlog::level::level_enum> global;
  std::map<std::string, spdlog::level::level_enum, std::less<>> levels;
  for (absl::string_view piece :
       absl::StrSplit(absl::string_view(spec.data(), spec.size()), ',', absl::SkipWhitespace())) {
    const std::string item(absl::StripAsciiWhitespace(piece));
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      if (global) {
        return absl::InvalidArgumentError(
            absl::StrCat("log levels '", std::string(spec), "' name the default level twice"));
      }
      SH_ASSIGN_OR_RETURN(global, ParseLevel(item));
      continue;
    }
    const std::string component = item.substr(0, eq);
    bool known = false;
    for (std::string_view c : kComponents) {
      known = known || c == component;
    }
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown log component '", component, "' (components: ",
                       absl::StrJoin(kComponents, ", ",
                                     [](std::string* out, std::string_view c) { out->append(c); }),
                       ")"));
    }
    SH_ASSIGN_OR_RETURN(levels[component], ParseLevel(item.substr(eq + 1)));
  }
  return ParsedLevels{global, std::move(levels)};
}

absl::Status CheckLogLevels(std::string_view spec) {
  return ParseLevels(spec).status();
}

absl::Status SetLogLevels(std::string_view spec) {
  SH_ASSIGN_OR_RETURN(ParsedLevels parsed, ParseLevels(spec));
  Registry& r = Get();
  std::lock_guard lock(r.mu);
  r.global = parsed.global.value_or(spdlog::level::info);
  r.levels = std::move(parsed.levels);
  spdlog::set_level(r.global);
  for (auto& [name, logger] : r.loggers) {
    logger->set_level(LevelFor(r, name));
  }
  return absl::OkStatus();
}

void RebindComponentLogs() {
  Registry& r = Get();
  std::lock_guard lock(r.mu);
  for (auto& [name, logger] : r.loggers) {
    logger->sinks() = spdlog::default_logger()->sinks();
  }
}

}  // namespace stagehand

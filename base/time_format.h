#pragma once

// Timestamps in files and APIs: RFC 3339, UTC, milliseconds ("2026-11-30T17:04:05.123Z").

#include <chrono>
#include <string>

namespace stagehand {

std::string FormatRfc3339(std::chrono::system_clock::time_point t);

}  // namespace stagehand

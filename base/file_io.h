#pragma once

// Small file helpers with explicit modes and crash-safe replacement.

#include <sys/types.h>

#include <string>
#include <string_view>

#include "base/status.h"

namespace stagehand {

// Reads the whole file. NotFound if it does not exist.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Writes `content` to `path` through a temp file in the same directory, fsyncs it, renames it
// over `path` and fsyncs the directory, so a crash leaves either the old or the new content.
// The file is created with `mode` (not subject to umask).
absl::Status WriteFileAtomically(const std::string& path, std::string_view content, mode_t mode);

// Creates `path` and missing parents with `mode`. OK if it already exists as a directory.
absl::Status MakeDirs(const std::string& path, mode_t mode);

// Removes a file; OK if it does not exist.
absl::Status RemoveFileIfExists(const std::string& path);

}  // namespace stagehand

#pragma once

// Pure path helpers: no filesystem access.

#include <string>
#include <string_view>

namespace stagehand {

// True when `path` is absolute and normalised: it starts with '/', has no empty, "." or ".."
// components, no trailing '/' (except "/" itself) and no NUL byte.
bool IsCleanAbsolutePath(std::string_view path);

// True when `path` equals `dir` or lies below it. Both must be clean absolute paths.
bool IsPathWithin(std::string_view path, std::string_view dir);

// The directory part of a clean absolute path ("/a/b" -> "/a", "/a" -> "/").
std::string ParentDir(std::string_view path);

// Joins with exactly one '/'.
std::string JoinPath(std::string_view a, std::string_view b);

}  // namespace stagehand

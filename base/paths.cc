#include "base/paths.h"

#include <absl/strings/match.h>
#include <absl/strings/str_split.h>

#include "base/status.h"

namespace stagehand {

bool IsCleanAbsolutePath(std::string_view path) {
  if (path.empty() || path.front() != '/' || absl::StrContains(ToAbsl(path), '\0')) {
    return false;
  }
  if (path == "/") {
    return true;
  }
  std::string_view rest = path.substr(1);
  for (absl::string_view part : absl::StrSplit(ToAbsl(rest), '/')) {
    if (part.empty() || part == "." || part == "..") {
      return false;
    }
  }
  return true;
}

bool IsPathWithin(std::string_view path, std::string_view dir) {
  if (dir == "/") {
    return true;
  }
  if (path.size() < dir.size() || path.substr(0, dir.size()) != dir) {
    return false;
  }
  return path.size() == dir.size() || path[dir.size()] == '/';
}

std::string ParentDir(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos || slash == 0) {
    return "/";
  }
  return std::string(path.substr(0, slash));
}

std::string JoinPath(std::string_view a, std::string_view b) {
  std::string out(a);
  while (!out.empty() && out.back() == '/') {
    out.pop_back();
  }
  while (!b.empty() && b.front() == '/') {
    b.remove_prefix(1);
  }
  out += '/';
  out += b;
  return out;
}

}  // namespace stagehand

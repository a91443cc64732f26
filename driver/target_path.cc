#include "driver/target_path.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "base/c_handle.h"
#include "base/log.h"
#include "base/paths.h"
#include "base/unique_fd.h"

namespace stagehand::driver {
namespace {

constexpr LogComponent kComponent = LogComponent::kCsi;

using Dir = CHandle<DIR, &closedir>;

}  // namespace

bool PathExists(const std::string& path) {
  struct stat st {};

  return lstat(path.c_str(), &st) == 0;
}

absl::Status CheckParentIsReal(const std::string& path, std::string_view field) {
  const std::string parent = ParentDir(path);
  std::array<char, PATH_MAX> resolved{};
  if (realpath(parent.c_str(), resolved.data()) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(field), " '", path,
                                                   "': parent directory '", parent,
                                                   "' does not exist; create it first"));
  }
  if (parent != resolved.data()) {
    return absl::InvalidArgumentError(absl::StrCat(
        ToAbsl(field), " '", path, "' goes through a symbolic link (its parent resolves to '",
        resolved.data(), "'); give the real path"));
  }

  struct stat st {};

  if (lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToAbsl(field), " '", path, "' is a symbolic link; give the real path"));
  }
  return absl::OkStatus();
}

absl::Status CheckTargetEmpty(const std::string& path, bool block) {
  struct stat st {};

  if (lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus()
                           : ErrnoStatus(errno, absl::StrCat("stat target_path '", path, "'"));
  }
  if (block) {
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("target_path '", path,
                       "' exists and is not a regular file; a block volume is bound "
                       "onto a file: give an absent path or an empty file"));
    }
    if (st.st_size != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("target_path '", path,
                       "' is a file with data; publishing would hide it: give an "
                       "absent path or an empty file"));
    }
    return absl::OkStatus();
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("target_path '", path, "' exists and is not a directory"));
  }
  Dir dir(opendir(path.c_str()));
  if (!dir) {
    return ErrnoStatus(errno, absl::StrCat("list target_path '", path, "'"));
  }
  while (const dirent* entry = readdir(dir.get())) {
    if (std::string_view(entry->d_name) != "." && std::string_view(entry->d_name) != "..") {
      return absl::FailedPreconditionError(absl::StrCat(
          "target_path '", path, "' is a directory that is not empty (it holds '", entry->d_name,
          "'); publishing would hide its contents: give an empty or absent path"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckNoOverlap(const std::vector<StagedVolume>& volumes, const std::string& volume_id,
                            const std::string& target) {
  auto overlaps = [&target](const std::string& path) {
    return !path.empty() && (IsPathWithin(target, path) || IsPathWithin(path, target));
  };
  for (const StagedVolume& other : volumes) {
    // A mount inside a staging path makes that volume's unstage fail (EBUSY); one over it or
    // over a publish would hide it.
    if (overlaps(other.staging_path)) {
      return absl::InvalidArgumentError(
          absl::StrCat("target_path '", target, "' overlaps the staging path '", other.staging_path,
                       "' of volume '", other.volume_id, "'; give a path outside it"));
    }
    for (const Publication& p : other.publications) {
      if (other.volume_id == volume_id && p.target_path == target) {
        continue;  // This very publish (a repeat).
      }
      if (overlaps(p.target_path)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "target_path '", target, "' overlaps '", p.target_path, "', where volume '",
            other.volume_id, "' is published; give a path outside it"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CreateBlockTarget(const std::string& path) {
  if (PathExists(path)) {
    return absl::OkStatus();
  }
  UniqueFd fd(open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("create target file '", path, "'"));
  }
  return absl::OkStatus();
}

absl::Status RemoveTarget(const std::string& path) {
  struct stat st {};

  if (lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus()
                           : ErrnoStatus(errno, absl::StrCat("stat '", path, "'"));
  }
  if (S_ISDIR(st.st_mode)) {
    if (rmdir(path.c_str()) != 0 && errno != ENOENT) {
      if (errno == ENOTEMPTY || errno == EEXIST) {
        Log(kComponent).warn("unpublish: target directory '{}' is not empty; leaving it", path);
        return absl::OkStatus();
      }
      return ErrnoStatus(errno, absl::StrCat("remove target directory '", path, "'"));
    }
    return absl::OkStatus();
  }
  if (!S_ISREG(st.st_mode) || st.st_size != 0) {
    Log(kComponent)
        .warn("unpublish: target '{}' is not the empty file stagehand made; leaving it", path);
    return absl::OkStatus();
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("remove target file '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace stagehand::driver

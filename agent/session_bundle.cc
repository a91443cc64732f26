#include "agent/session_bundle.h"

#include <stdio.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "base/sha256.h"
#include "base/subprocess.h"

namespace stagehand::agent {
namespace {

constexpr char kComplete[] = ".complete";

std::string Basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

absl::Status CopyFile(const std::string& from, const std::string& to, mode_t mode) {
  SH_ASSIGN_OR_RETURN(std::string content, ReadFileToString(from));
  return WriteFileAtomically(to, content, mode, Durability::kAtomicOnly);
}

std::vector<std::string> Command(const std::string& dir, const std::string& interpreter) {
  return {JoinPath(dir, JoinPath("lib", interpreter)), "--library-path", JoinPath(dir, "lib"),
          JoinPath(dir, "stagehand-session"), "__session"};
}

}  // namespace

absl::StatusOr<std::vector<std::string>> InstallSessionBundle(const std::string& session_binary,
                                                              const std::string& bundle_root) {
  SH_RETURN_IF_ERROR(MakeDirs(bundle_root, 0755));

  struct statvfs fs {};

  if (statvfs(bundle_root.c_str(), &fs) != 0) {
    return ErrnoStatus(errno, absl::StrCat("statvfs '", bundle_root, "'"));
  }
  if ((fs.f_flag & ST_NOEXEC) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", bundle_root,
                     "' is on a filesystem mounted noexec, so the session binary cannot run from "
                     "there; set --session-bundle-dir to an executable host path"));
  }
  SH_ASSIGN_OR_RETURN(std::string binary, ReadFileToString(session_binary));
  const std::string dir = JoinPath(bundle_root, Sha256Hex(binary).substr(0, 16));

  // What the binary loads, as its own dynamic loader resolved it on this (container) system.
  SH_ASSIGN_OR_RETURN(ProcessResult listed,
                      RunProcess({session_binary, "__list-libraries"},
                                 RunOptions{.timeout = std::chrono::seconds(10)}));
  if (listed.exit_code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", session_binary, " __list-libraries' failed: ", listed.output));
  }
  std::string interpreter;
  std::vector<std::string> libraries;
  for (absl::string_view line : absl::StrSplit(listed.output, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    if (kv.first == "interpreter") {
      interpreter = kv.second;
    } else if (kv.first == "library") {
      libraries.push_back(kv.second);
    }
  }
  if (interpreter.empty() || !IsCleanAbsolutePath(interpreter)) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", session_binary, "' did not name its dynamic loader"));
  }
  if (access(JoinPath(dir, kComplete).c_str(), F_OK) == 0) {
    return Command(dir, Basename(interpreter));
  }

  // Built in a private directory, then renamed into place: a bundle directory is complete or
  // absent, also when two agents race or one dies half-way.
  const std::string tmp =
      JoinPath(bundle_root, absl::StrCat(".tmp-", getpid(), "-", Basename(dir)));
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
  SH_RETURN_IF_ERROR(MakeDirs(JoinPath(tmp, "lib"), 0755));
  absl::Status status = CopyFile(session_binary, JoinPath(tmp, "stagehand-session"), 0755);
  if (status.ok()) {
    status = CopyFile(interpreter, JoinPath(tmp, JoinPath("lib", Basename(interpreter))), 0755);
  }
  for (const auto& lib : libraries) {
    if (!status.ok()) {
      break;
    }
    status = CopyFile(lib, JoinPath(tmp, JoinPath("lib", Basename(lib))), 0755);
  }
  if (status.ok()) {
    status = WriteFileAtomically(JoinPath(tmp, kComplete), "", 0644, Durability::kAtomicOnly);
  }
  if (status.ok() && rename(tmp.c_str(), dir.c_str()) != 0 && errno != EEXIST &&
      errno != ENOTEMPTY) {
    status = ErrnoStatus(errno, absl::StrCat("rename '", tmp, "' to '", dir, "'"));
  }
  std::filesystem::remove_all(tmp, ec);  // Left over when another agent won the race.
  SH_RETURN_IF_ERROR(status);
  return Command(dir, Basename(interpreter));
}

}  // namespace stagehand::agent

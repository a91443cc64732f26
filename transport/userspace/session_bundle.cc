#include "transport/userspace/session_bundle.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <string_view>
#include <system_error>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "base/file_io.h"
#include "base/paths.h"
#include "base/sha256.h"
#include "base/subprocess.h"
#include "base/unique_fd.h"

namespace stagehand::transport::userspace {
namespace {

constexpr char kComplete[] = ".complete";

std::string Basename(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// Files are streamed, never read whole: the session binary and libc are megabytes, and glibc
// keeps a freed buffer that large in the agent's heap for good. Calls `chunk` with each piece.
absl::Status ReadInChunks(const std::string& path,
                          const std::function<absl::Status(std::string_view)>& chunk) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open '", path, "'"));
  }
  std::array<char, 65536> buffer{};
  while (true) {
    const ssize_t n = read(fd.Get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return ErrnoStatus(errno, absl::StrCat("read '", path, "'"));
    }
    if (n == 0) {
      return absl::OkStatus();
    }
    SH_RETURN_IF_ERROR(chunk(std::string_view(buffer.data(), static_cast<size_t>(n))));
  }
}

absl::StatusOr<std::string> Sha256OfFile(const std::string& path) {
  Sha256 hash;
  SH_RETURN_IF_ERROR(ReadInChunks(path, [&hash](std::string_view piece) {
    hash.Update(piece);
    return absl::OkStatus();
  }));
  return hash.HexDigest();
}

// Into the bundle's private build directory, so no temp file of its own is needed.
absl::Status CopyFile(const std::string& from, const std::string& to, mode_t mode) {
  UniqueFd out(open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!out || fchmod(out.Get(), mode) != 0) {
    return ErrnoStatus(errno, absl::StrCat("create '", to, "'"));
  }
  return ReadInChunks(from, [&out, &to](std::string_view piece) {
    while (!piece.empty()) {
      const ssize_t n = write(out.Get(), piece.data(), piece.size());
      if (n < 0 && errno != EINTR) {
        return ErrnoStatus(errno, absl::StrCat("write '", to, "'"));
      }
      piece.remove_prefix(n < 0 ? 0 : static_cast<size_t>(n));
    }
    return absl::OkStatus();
  });
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
  SH_ASSIGN_OR_RETURN(std::string digest, Sha256OfFile(session_binary));
  const std::string dir = JoinPath(bundle_root, digest.substr(0, 16));

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

}  // namespace stagehand::transport::userspace

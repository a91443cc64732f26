#include "base/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <utility>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/str_cat.h>

#include "base/paths.h"
#include "base/unique_fd.h"

namespace stagehand {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open '", path, "'"));
  }
  std::string out;
  std::array<char, 8192> buf{};
  while (true) {
    ssize_t n = read(fd.Get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return ErrnoStatus(errno, absl::StrCat("read '", path, "'"));
    }
    if (n == 0) {
      break;
    }
    out.append(buf.data(), static_cast<size_t>(n));
  }
  return out;
}

namespace {

// Writes all of `content`: from offset 0 with pwrite when `positional`, else with write (pipes).
absl::Status WriteLoop(int fd, std::string_view content, bool positional, std::string_view what) {
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = positional ? pwrite(fd, content.data() + done, content.size() - done,
                                          static_cast<off_t>(done))
                                 : write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return ErrnoStatus(n < 0 ? errno : EIO, absl::StrCat("write ", ToAbsl(what)));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Reads until end of file: from offset 0 with pread when `positional`, else with read.
absl::StatusOr<std::string> ReadLoop(int fd, bool positional, std::string_view what) {
  std::string out;
  std::array<char, 4096> buf{};
  while (true) {
    const ssize_t n = positional ? pread(fd, buf.data(), buf.size(), static_cast<off_t>(out.size()))
                                 : read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return ErrnoStatus(errno, absl::StrCat("read ", ToAbsl(what)));
    }
    if (n == 0) {
      return out;
    }
    out.append(buf.data(), static_cast<size_t>(n));
  }
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, std::string_view content, mode_t mode,
                                 Durability durability) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  const bool rewrite = durability == Durability::kAtomicRewrite;
  // A rewrite keeps the previous version's inode and blocks: no O_TRUNC, the length is set after
  // the write.
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (rewrite ? 0 : O_TRUNC), mode));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("create '", tmp, "'"));
  }
  // A failed write (a full disk) leaves neither a partial file nor the temp file behind.
  absl::Cleanup remove_tmp = [&tmp] { (void)unlink(tmp.c_str()); };
  if (fchmod(fd.Get(), mode) != 0) {
    return ErrnoStatus(errno, absl::StrCat("chmod '", tmp, "'"));
  }
  SH_RETURN_IF_ERROR(
      WriteLoop(fd.Get(), content, /*positional=*/true, absl::StrCat("'", tmp, "'")));
  if (rewrite && ftruncate(fd.Get(), static_cast<off_t>(content.size())) != 0) {
    return ErrnoStatus(errno, absl::StrCat("truncate '", tmp, "'"));
  }
  if (durability == Durability::kSynced && fsync(fd.Get()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("fsync '", tmp, "'"));
  }
  fd.Reset();
  if (rewrite && renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0) {
    std::move(remove_tmp).Cancel();  // It holds the previous version now.
    return absl::OkStatus();
  }
  // The first write (nothing to exchange with), or a filesystem without RENAME_EXCHANGE.
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("rename '", tmp, "'"));
  }
  std::move(remove_tmp).Cancel();
  if (durability == Durability::kSynced) {
    UniqueFd dir(open(ParentDir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir) {
      (void)fsync(dir.Get());
    }
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& path, mode_t mode) {
  if (path.empty() || path == "/") {
    return absl::OkStatus();
  }

  struct stat st {};

  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' exists and is not a directory"));
  }
  SH_RETURN_IF_ERROR(MakeDirs(ParentDir(path), mode));
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, absl::StrCat("mkdir '", path, "'"));
  }
  return absl::OkStatus();
}

absl::Status RemoveRewrittenFile(const std::string& path) {
  // The previous version first: a crash in between leaves the file, which is removed again.
  SH_RETURN_IF_ERROR(RemoveFileIfExists(absl::StrCat(path, ".tmp")));
  return RemoveFileIfExists(path);
}

absl::Status RemoveFileIfExists(const std::string& path) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("unlink '", path, "'"));
  }
  return absl::OkStatus();
}

absl::Status SyncPath(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return errno == ENOENT || errno == ENXIO || errno == ENODEV
               ? absl::OkStatus()
               : ErrnoStatus(errno, absl::StrCat("open '", path, "'"));
  }
  if (fsync(fd.Get()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("fsync '", path, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> SealedMemoryFile(const char* name, std::string_view content) {
  UniqueFd fd(memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) {
    return ErrnoStatus(errno, "memfd_create");
  }
  // pwrite: the file offset stays at 0, so a reader (a process given it as stdin) reads it all.
  SH_RETURN_IF_ERROR(WriteLoop(fd.Get(), content, /*positional=*/true, "memfd"));
  if (fcntl(fd.Get(), F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) != 0) {
    return ErrnoStatus(errno, "seal memfd");
  }
  return fd;
}

absl::StatusOr<std::string> ReadWholeFd(int fd) {
  return ReadLoop(fd, /*positional=*/true, "descriptor");
}

absl::StatusOr<std::string> ReadToEnd(int fd) {
  return ReadLoop(fd, /*positional=*/false, "descriptor");
}

absl::Status WriteFully(int fd, std::string_view data) {
  return WriteLoop(fd, data, /*positional=*/false, "descriptor");
}

}  // namespace stagehand

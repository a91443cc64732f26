#pragma once

// Small file helpers with explicit modes and crash-safe replacement.

#include <sys/types.h>

#include <string>
#include <string_view>

#include "base/status.h"
#include "base/unique_fd.h"

namespace stagehand {

// Reads the whole file. NotFound if it does not exist.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

enum class Durability {
  kSynced,      // fsync the file and its directory: survives a power loss.
  kAtomicOnly,  // No fsync: survives a process crash (old or new content), not a power loss.
  // As kAtomicOnly, for a file rewritten often: the previous version stays at "<path>.tmp", a
  // rewrite writes over it in place and swaps it in with renameat2(RENAME_EXCHANGE), so that a
  // rewrite neither creates nor frees an inode (on ext4 mounted with `discard`, freeing the
  // replaced inode costs a synchronous discard). Remove such a file with RemoveRewrittenFile.
  // After a power loss the file may be torn (nothing is fsynced, and a write over existing
  // blocks is not ordered before the exchange): readers must treat an unparsable file as lost.
  kAtomicRewrite,
};

// Writes `content` to `path` through a temp file in the same directory and renames it over
// `path`, so a crash leaves either the old or the new content; with kSynced the file and the
// directory are fsynced too. The file is created with `mode` (not subject to umask).
absl::Status WriteFileAtomically(const std::string& path, std::string_view content, mode_t mode,
                                 Durability durability = Durability::kSynced);

// Creates `path` and missing parents with `mode`. OK if it already exists as a directory.
absl::Status MakeDirs(const std::string& path, mode_t mode);

// Removes a file; OK if it does not exist.
absl::Status RemoveFileIfExists(const std::string& path);

// fsync of what `path` names (a block device: its page cache written back, then a cache flush
// sent to the device). OK if it does not exist.
absl::Status SyncPath(const std::string& path);

// Removes a file written with Durability::kAtomicRewrite and its previous version.
absl::Status RemoveRewrittenFile(const std::string& path);

// A memory file holding `content`, sealed against writes and resizing (memfd_create), for
// handing data to another process through a descriptor without touching any filesystem. Its
// offset is 0: read(2) from it reads `content`.
absl::StatusOr<UniqueFd> SealedMemoryFile(const char* name, std::string_view content);

// Everything `fd` holds, read from offset 0 with pread (the file offset is not moved).
absl::StatusOr<std::string> ReadWholeFd(int fd);

// Everything read from `fd` (a pipe, a socket) until end of file.
absl::StatusOr<std::string> ReadToEnd(int fd);

// Writes all of `data` to `fd` (a pipe, a socket), retrying short writes and EINTR.
absl::Status WriteFully(int fd, std::string_view data);

}  // namespace stagehand

#include "base/lock_file.h"

#include <fcntl.h>

#include <cerrno>

#include <absl/strings/str_cat.h>

namespace stagehand {

absl::StatusOr<UniqueFd> LockFile(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("open lock file '", path, "'"));
  }

  struct flock whole {};

  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;  // From the start, l_len 0: the whole file.
  if (fcntl(fd.Get(), F_SETLK, &whole) != 0) {
    if (errno == EACCES || errno == EAGAIN) {
      return absl::FailedPreconditionError(absl::StrCat(
          "another stagehand is running with the same state directory or socket (lock '", path,
          "' is held); stop it first"));
    }
    return ErrnoStatus(errno, absl::StrCat("lock '", path, "'"));
  }
  return fd;
}

}  // namespace stagehand

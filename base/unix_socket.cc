#include "base/unix_socket.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include <absl/strings/str_cat.h>

namespace stagehand {

absl::Status ToUnixAddress(const std::string& address, sockaddr_un* sa, socklen_t* len) {
  *sa = sockaddr_un{};
  sa->sun_family = AF_UNIX;
  if (address.empty() || address.size() >= sizeof(sa->sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("bad unix socket address '", address, "'"));
  }
  std::memcpy(sa->sun_path, address.data(), address.size());
  if (address[0] == '@') {
    sa->sun_path[0] = '\0';  // Abstract: no trailing NUL counted.
    *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size());
  } else {
    *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + address.size() + 1);
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> BindUnixSocket(const std::string& address, int type,
                                        const BindOptions& options) {
  sockaddr_un sa{};
  socklen_t len = 0;
  SH_RETURN_IF_ERROR(ToUnixAddress(address, &sa, &len));
  UniqueFd fd(socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("socket for '", address, "'"));
  }
  if (options.before_bind) {
    SH_RETURN_IF_ERROR(options.before_bind(fd.Get()));
  }
  if (options.replace_stale && address[0] != '@') {
    unlink(address.c_str());
  }
  const mode_t old_mask = umask(0077);
  const int bound = bind(fd.Get(), reinterpret_cast<const sockaddr*>(&sa), len);
  const int bind_errno = errno;
  umask(old_mask);
  if (bound != 0) {
    return ErrnoStatus(bind_errno, absl::StrCat("bind '", address, "'"));
  }
  if (options.listen_backlog > 0 && listen(fd.Get(), options.listen_backlog) != 0) {
    return ErrnoStatus(errno, absl::StrCat("listen on '", address, "'"));
  }
  return fd;
}

absl::StatusOr<UniqueFd> ConnectUnixSocket(const std::string& address, int type) {
  sockaddr_un sa{};
  socklen_t len = 0;
  SH_RETURN_IF_ERROR(ToUnixAddress(address, &sa, &len));
  UniqueFd fd(socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  if (!fd) {
    return ErrnoStatus(errno, absl::StrCat("socket for '", address, "'"));
  }
  if (connect(fd.Get(), reinterpret_cast<const sockaddr*>(&sa), len) != 0) {
    return absl::UnavailableError(
        absl::StrCat("nothing listens on '", address, "': ", ErrnoText(errno)));
  }
  return fd;
}

absl::Status CheckListening(const std::string& path) {
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path '", path, "' is too long"));
  }
  return ConnectUnixSocket(path, SOCK_STREAM).status();
}

}  // namespace stagehand

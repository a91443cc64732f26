#include "base/unix_socket.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>

#include <absl/strings/str_cat.h>

#include "base/unique_fd.h"

namespace stagehand {

absl::Status CheckListening(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path '", path, "' is too long"));
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    return ErrnoStatus(errno, "socket");
  }
  if (connect(fd.Get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("nothing listens on '", path, "': ", ErrnoText(errno)));
  }
  return absl::OkStatus();
}

}  // namespace stagehand

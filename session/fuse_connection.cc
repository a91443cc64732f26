#include "session/fuse_connection.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <sys/mount.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <vector>

#include <absl/strings/str_cat.h>

namespace stagehand::session {
namespace {

absl::Status MakeNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoStatus(errno, "make /dev/fuse non-blocking");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FuseConnection> FuseConnection::Mount(const FuseMountOptions& options) {
  UniqueFd fd(open("/dev/fuse", O_RDWR | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    return absl::UnavailableError(
        absl::StrCat("cannot open /dev/fuse: ", ErrnoStatus(errno, "open").message()));
  }
  std::string data =
      absl::StrCat("fd=", fd.Get(), ",rootmode=40000,user_id=", getuid(), ",group_id=", getgid());
  if (options.max_read > 0) {
    absl::StrAppend(&data, ",max_read=", options.max_read);
  }
  const std::string type = absl::StrCat("fuse.", options.subtype);
  if (mount(options.source.c_str(), options.mountpoint.c_str(), type.c_str(), MS_NOSUID | MS_NODEV,
            data.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot mount FUSE at '", options.mountpoint,
                                               "': ", ErrnoStatus(errno, "mount").message()));
  }
  return FuseConnection(std::move(fd), options.mountpoint);
}

absl::StatusOr<FuseConnection> FuseConnection::Adopt(UniqueFd fd, std::string mountpoint) {
  if (!fd) {
    return absl::InvalidArgumentError("no /dev/fuse descriptor to adopt");
  }
  SH_RETURN_IF_ERROR(MakeNonBlocking(fd.Get()));
  return FuseConnection(std::move(fd), std::move(mountpoint));
}

FuseConnection FuseConnection::ForTest(UniqueFd fd, std::string mountpoint) {
  (void)MakeNonBlocking(fd.Get());
  return FuseConnection(std::move(fd), std::move(mountpoint));
}

absl::StatusOr<size_t> FuseConnection::Receive(std::span<uint8_t> buffer) {
  while (true) {
    const ssize_t n = read(fd_.Get(), buffer.data(), buffer.size());
    if (n > 0) {
      return static_cast<size_t>(n);
    }
    // ENOENT: the request was interrupted while being read; the next one may wait.
    if (n < 0 && errno == ENOENT) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      return 0;
    }
    if (n == 0 || errno == ENODEV) {
      return absl::AbortedError(absl::StrCat("the FUSE connection of '", mountpoint_, "' ended"));
    }
    return ErrnoStatus(errno, absl::StrCat("read /dev/fuse of '", mountpoint_, "'"));
  }
}

absl::Status FuseConnection::Send(std::span<iovec> iov) {
  while (true) {
    if (writev(fd_.Get(), iov.data(), static_cast<int>(iov.size())) >= 0) {
      return absl::OkStatus();
    }
    if (errno == EINTR) {
      continue;
    }
    if (errno == ENOENT) {
      return absl::OkStatus();  // Interrupted or aborted: nobody waits for the answer.
    }
    return ErrnoStatus(errno, absl::StrCat("write /dev/fuse of '", mountpoint_, "'"));
  }
}

absl::Status FuseConnection::Reply(uint64_t unique, int error,
                                   std::initializer_list<std::span<const uint8_t>> payload) {
  if (ring_ != nullptr && ring_->Reply(unique, error, payload)) {
    return absl::OkStatus();
  }
  fuse_out_header out{};
  out.unique = unique;
  out.error = -error;
  std::array<iovec, 4> iov{};
  iov[0] = {&out, sizeof(out)};
  size_t n = 1;
  size_t len = sizeof(out);
  if (error == 0) {
    for (const auto& piece : payload) {
      if (n == iov.size()) {
        return absl::InternalError("a FUSE reply of more than three pieces");
      }
      if (!piece.empty()) {
        iov[n++] = {const_cast<uint8_t*>(piece.data()), piece.size()};
        len += piece.size();
      }
    }
  }
  out.len = static_cast<uint32_t>(len);
  return Send(std::span(iov.data(), n));
}

absl::Status FuseConnection::NotifyInvalInode(uint64_t ino) {
  fuse_out_header out{};
  fuse_notify_inval_inode_out arg{};
  arg.ino = ino;
  arg.off = 0;
  arg.len = 0;  // 0: the attributes only, no pages (direct I/O keeps none).
  out.len = sizeof(out) + sizeof(arg);
  out.error = FUSE_NOTIFY_INVAL_INODE;
  std::array<iovec, 2> iov{{{&out, sizeof(out)}, {&arg, sizeof(arg)}}};
  return Send(iov);
}

absl::Status FuseConnection::NotifyResend() {
  fuse_out_header out{};
  out.len = sizeof(out);
  out.error = kFuseNotifyResend;
  std::array<iovec, 1> iov{{{&out, sizeof(out)}}};
  absl::Status sent = Send(iov);
  if (!sent.ok() && absl::IsInvalidArgument(sent)) {
    return absl::UnimplementedError(
        "this kernel cannot resend FUSE requests (FUSE_NOTIFY_RESEND needs Linux 6.9)");
  }
  return sent;
}

absl::Status FuseConnection::StartRing(const FuseRing::Options& options) {
  SH_ASSIGN_OR_RETURN(ring_, FuseRing::Start(fd_.Get(), options));
  return absl::OkStatus();
}

absl::Status FuseConnection::Unmount() {
  if (mountpoint_.empty()) {
    return absl::OkStatus();
  }
  if (umount2(mountpoint_.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) {
    return ErrnoStatus(errno, absl::StrCat("unmount FUSE at '", mountpoint_, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> FuseConnection::Duplicate() const {
  UniqueFd copy(fcntl(fd_.Get(), F_DUPFD_CLOEXEC, 3));
  if (!copy) {
    return ErrnoStatus(errno, "duplicate /dev/fuse");
  }
  return copy;
}

}  // namespace stagehand::session

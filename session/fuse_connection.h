#pragma once

// One FUSE connection, spoken directly in the kernel's protocol (the ABI of <linux/fuse.h>)
// rather than through libfuse: libfuse 3.14 cannot serve a connection whose INIT another process
// answered, and a session process that dies must leave its connection to a successor. The
// connection lives as long as any process holds the /dev/fuse descriptor, so whoever holds a
// duplicate (systemd's file descriptor store, a keeper process) keeps the mount, the loop device
// over its file and the filesystem on top alive while the server process is replaced.
//
// This class moves bytes: it mounts, reads one request at a time, and writes replies and
// notifications. What the requests mean is the server's business (lun_file.h).
//
// Thread-compatible: one owner thread.

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"
#include "session/fuse_ring.h"

namespace stagehand::session {

// Newer parts of the protocol than Debian 12's <linux/fuse.h> (7.38) knows.
inline constexpr int kFuseNotifyResend = 7;  // 7.40, Linux 6.9: queue unanswered requests again.
inline constexpr uint64_t kFuseHasResend = uint64_t{1} << 39;    // INIT flag: the kernel has it.
inline constexpr uint64_t kFuseOverIoUring = uint64_t{1} << 41;  // 7.42, Linux 6.14.

// The bytes of a protocol struct, for a reply.
template <typename T>
std::span<const uint8_t> BytesOf(const T& value) {
  return {reinterpret_cast<const uint8_t*>(&value), sizeof(T)};
}

struct FuseMountOptions {
  std::string mountpoint;  // An existing empty directory.
  std::string source = "stagehand";
  std::string subtype = "iscsi";  // The mount's type is "fuse.<subtype>".
  uint32_t max_read = 0;          // 0: the kernel's default.
};

class FuseConnection {
 public:
  // Opens /dev/fuse and mounts it at `options.mountpoint`. The kernel queues INIT at once; the
  // server answers it like any request. Unavailable when the mount fails (no FUSE, not root).
  static absl::StatusOr<FuseConnection> Mount(const FuseMountOptions& options);

  // Serves a connection that someone else mounted (and usually initialized): `fd` is a
  // duplicate of its /dev/fuse descriptor. Made non-blocking.
  static absl::StatusOr<FuseConnection> Adopt(UniqueFd fd, std::string mountpoint);

  // Any descriptor, to play the kernel in tests (a SOCK_SEQPACKET socket keeps message bounds
  // as /dev/fuse does).
  static FuseConnection ForTest(UniqueFd fd, std::string mountpoint);

  FuseConnection() = default;
  FuseConnection(FuseConnection&&) noexcept = default;
  FuseConnection& operator=(FuseConnection&&) noexcept = default;
  FuseConnection(const FuseConnection&) = delete;
  FuseConnection& operator=(const FuseConnection&) = delete;
  // Closes the descriptor. The mount stays (Unmount() ends it): it dies with the last holder
  // of the descriptor, or lives on with a successor.
  ~FuseConnection() = default;

  // For poll(2): readable when a request waits.
  int Fd() const { return fd_.Get(); }

  const std::string& mountpoint() const { return mountpoint_; }

  // Reads the next request into `buffer`, which must hold the largest request (max_write plus
  // the headers, at least 8 KiB). Returns its length; 0 when none waits. Aborted once the
  // connection has ended (unmounted, or aborted through /sys/fs/fuse/connections).
  absl::StatusOr<size_t> Receive(std::span<uint8_t> buffer);

  // Answers request `unique` with `error` (0 or a positive errno) and, when 0, the payload in
  // pieces (written with one writev, never copied). A request the kernel no longer waits for
  // (interrupted, or answered by someone else) is not an error.
  absl::Status Reply(uint64_t unique, int error,
                     std::initializer_list<std::span<const uint8_t>> payload = {});

  // Drops the kernel's cached attributes (the size) and pages of inode `ino`.
  absl::Status NotifyInvalInode(uint64_t ino);

  // Has the kernel queue again every request a server read but did not answer (one that died
  // in between). Unimplemented on kernels without FUSE_NOTIFY_RESEND (before 6.9).
  absl::Status NotifyResend();

  // Starts FUSE over io_uring on this connection (its INIT answered with FUSE_OVER_IO_URING,
  // or adopted from a server that had): from then on the kernel delivers requests through the
  // ring once every queue has entries, and Reply answers those through it.
  absl::Status StartRing(const FuseRing::Options& options);

  // The ring, once started; null before.
  FuseRing* ring() { return ring_.get(); }

  // Hands queued ring replies to the kernel (nothing to do without a ring).
  absl::Status Flush() { return ring_ != nullptr ? ring_->Flush() : absl::OkStatus(); }

  // Detaches the mount (lazily: what has the file open keeps it until closed). Idempotent.
  absl::Status Unmount();

  // A duplicate of the descriptor (close-on-exec), to hand to a holder or a successor.
  absl::StatusOr<UniqueFd> Duplicate() const;

 private:
  FuseConnection(UniqueFd fd, std::string mountpoint)
      : fd_(std::move(fd)), mountpoint_(std::move(mountpoint)) {}

  // Writes `iov` as one message. ENOENT (nobody waits for it) is OK.
  absl::Status Send(std::span<iovec> iov);

  UniqueFd fd_;
  std::string mountpoint_;
  std::unique_ptr<FuseRing> ring_;  // Destroyed first: it refers to fd_.
};

}  // namespace stagehand::session

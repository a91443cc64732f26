#pragma once

// Serves one iSCSI LUN as a single file on a FUSE mount, from one thread that owns both the
// /dev/fuse channel and the iSCSI socket: at 4 KiB, handing a request from one thread to
// another cost more than everything else on its path (bench/README.md has the measurements of
// the data path). Requests are answered from libiscsi completion callbacks; nothing blocks
// except the (re)login. Three parts share that thread: the FUSE side (lun_file.h), the
// commands on the connection (command_queue.h) and the logins (reconnector.h).
//
// Reconnects are ours, not libiscsi's: when the connection drops, in-flight commands are
// parked, the server logs in again (rotating through the portals), re-reads the LUN identity
// and resumes the parked commands only if it is the same LUN. A different LUN fails closed:
// every request, parked or new, gets EIO, for good.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "iscsi/libiscsi_connection.h"
#include "iscsi/lun_identity.h"
#include "iscsi/target_spec.h"
#include "session/counters_file.h"
#include "session/server_status.h"

namespace stagehand::session {

struct FuseLunServerOptions {
  std::vector<iscsi::Portal> portals;  // Tried in turn on reconnect, starting with the current one.
  iscsi::LoginParams login;     // iscsi::Portal of the initial connection; reused for reconnects.
  iscsi::LunIdentity identity;  // What the LUN must keep reporting.
  iscsi::LunCapacity capacity;
  std::string mountpoint;  // Existing empty directory; the FUSE mount goes here.
  std::string file_name = "lun";
  // Data-path counters to bump (a shared mapping, see datapath_counters.h); may be null.
  DataPathCounters* counters = nullptr;
  // Called on the server thread at every state change.
  std::function<void(const ServerStatus&)> on_status;
  // Called on the server thread at least once a second while it serves or logs in (a
  // watchdog ping for the process's manager). May be empty.
  std::function<void()> on_alive;
  // How long I/O waits for a lost connection to come back: after it, parked and new requests
  // fail with EIO (so that nothing hangs on a target that is gone) while the reconnects go on;
  // once a login succeeds, I/O works again.
  std::chrono::seconds replacement_timeout{120};
  // I/O buffers allocated at once (BufferPool::Reserve), not on the first requests.
  size_t reserved_buffers = 0;
  // FUSE over io_uring when the kernel offers it (see fuse_ring.h); the classic loop otherwise.
  // Adopt: the earlier server ran a ring (this one must register its own).
  bool fuse_io_uring = false;
  // Adopt: when the connection was lost, if before this process (see ReconnectorOptions).
  std::optional<std::chrono::steady_clock::time_point> lost_since;
  // Non-zero: the LUN is reserved under this key (claimed by the caller before the first
  // I/O, at this generation); every reconnect claims it again (ReconnectorOptions).
  uint64_t reservation_key = 0;
  uint32_t reservation_generation = 0;
  // The registration's key now (0 for a successor, whose first login claims afresh), and how
  // often it moves to a fresh key (CommandQueueOptions::renew_every).
  uint64_t reservation_current = 0;
  std::chrono::seconds reservation_renew{0};
};

class FuseLunServer {
 public:
  // Mounts the FUSE filesystem at `options.mountpoint`; takes over `connection`.
  // Internal/Unavailable if the mount fails.
  static absl::StatusOr<std::unique_ptr<FuseLunServer>> Create(
      FuseLunServerOptions options, std::unique_ptr<iscsi::Connection> connection);

  // Serves the FUSE connection of an earlier server that ended (`fuse` is a duplicate of its
  // /dev/fuse descriptor; the mount, the loop device and the filesystem above stay as they
  // are). Run() first logs in (portals in turn, backing off) and checks that the LUN is
  // `options.identity` (another LUN fails closed, as after any reconnect), meanwhile the kernel
  // holds the volume's I/O; then it has the kernel resend what the earlier server read and never
  // answered, and serves. A login that takes longer than the replacement timeout fails I/O with
  // EIO meanwhile, as a reconnect does.
  static absl::StatusOr<std::unique_ptr<FuseLunServer>> Adopt(FuseLunServerOptions options,
                                                              UniqueFd fuse);

  // As Adopt, with a connection already logged in to the LUN `options.identity` names (a
  // successor that checked it before the handover): Run() resends and serves at once.
  static absl::StatusOr<std::unique_ptr<FuseLunServer>> AdoptConnected(
      FuseLunServerOptions options, UniqueFd fuse, std::unique_ptr<iscsi::Connection> connection);

  // A duplicate of the /dev/fuse descriptor, for the process's manager to keep.
  absl::StatusOr<UniqueFd> DuplicateFuse() const;

  // The handover to a successor (handover.h), on the server thread. More descriptors for the
  // serving loop: `fds` is asked before each wait, `on_readable` called for each readable one.
  void SetExtraPoll(std::function<std::vector<int>()> fds, std::function<void(int)> on_readable);
  // Stops taking FUSE requests; calls `drained` once every request taken is answered, or after
  // `bound` (the successor has the kernel resend the rest).
  void PauseFuse(std::chrono::milliseconds bound, std::function<void()> drained);
  // Takes FUSE requests again (the successor went away).
  void ResumeFuse();
  // Ends Run() (it returns OK), leaving the FUSE mount to the successor.
  void EndKeepingMount();

  FuseLunServer(const FuseLunServer&) = delete;
  FuseLunServer& operator=(const FuseLunServer&) = delete;
  // Unmounts the FUSE filesystem and logs out.
  ~FuseLunServer();

  // Serves until `stop_fd` becomes readable (e.g. a signalfd for SIGTERM): returns OK. Returns
  // Aborted when the kernel ends the FUSE connection first (aborted through
  // /sys/fs/fuse/connections, or the mount forced away): the volume's I/O fails from then on.
  // Each time `refresh_fd` (a signalfd for SIGUSR1) becomes readable, the LUN's capacity is read
  // again (after the target grew it) and published.
  absl::Status Run(int stop_fd, int refresh_fd);

  // Full path of the LUN file.
  std::string LunPath() const;

  struct Impl;  // The parts and their wiring, in fuse_lun_server.cc.

 private:
  explicit FuseLunServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stagehand::session

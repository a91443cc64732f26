#include "session/fuse_lun_server.h"

#include <poll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <limits>
#include <utility>
#include <vector>

#include <absl/strings/str_cat.h>

#include "base/paths.h"
#include "base/unique_fd.h"
#include "session/command_queue.h"
#include "session/io_request.h"
#include "session/lun_file.h"
#include "session/reconnector.h"

namespace stagehand::session {
namespace {

constexpr int kTickSeconds = 1;
constexpr size_t kNoSlot = std::numeric_limits<size_t>::max();

}  // namespace

// The three parts and what wires them. Declared in destruction order's reverse: the FUSE side
// goes first (unmount), then the queue (logout; what waits is dropped, its buffers go back to
// the pool), then the pool and the board.
struct FuseLunServer::Impl {
  std::string mountpoint;
  std::string file_name;
  DataPathCounters* counters = nullptr;  // The heartbeat goes here; may be null.
  std::function<void()> on_alive;        // May be empty.
  // Adopted: the kernel must resend what the earlier server left unanswered, once, before
  // this one serves the first request.
  bool resend_pending = false;
  // Handing over to a successor: no FUSE requests taken; `drained` is called once every one
  // taken is answered (or at `drain_deadline`); `ending` ends Run() leaving the mount.
  bool fuse_paused = false;
  std::function<void()> drained;
  std::chrono::steady_clock::time_point drain_deadline;
  bool ending = false;
  std::function<std::vector<int>()> extra_fds;
  std::function<void(int)> on_extra;
  StatusBoard board;
  BufferPool pool;
  std::unique_ptr<CommandQueue> queue;
  std::unique_ptr<LunFile> file;
  std::unique_ptr<Reconnector> reconnector;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // A server that stops ends its mount (nothing may use the LUN file after it), unless it
  // handed the mount to a successor.
  ~Impl() {
    if (file != nullptr && !ending) {
      (void)file->Unmount();
    }
  }

  struct Descriptors {
    int stop;
    int refresh;
    int timer;
  };
  enum class Turn { kGoOn, kStop, kFuseEnded };

  // One wait of the serving loop and what it brought: iSCSI completions, a capacity refresh, a
  // tick, FUSE requests, the extra descriptors. `fds` is scratch space kept between turns.
  absl::StatusOr<Turn> WaitAndServe(const Descriptors& d, std::vector<pollfd>& fds) {
    // Fixed slots first: stop, timer, refresh, FUSE (unless paused), the connection; then the
    // extra descriptors (the handover socket).
    fds.assign({{d.stop, POLLIN, 0}, {d.timer, POLLIN, 0}, {d.refresh, POLLIN, 0}});
    const size_t fuse_slot = fuse_paused ? kNoSlot : fds.size();
    if (!fuse_paused) {
      fds.push_back({file->Fd(), POLLIN, 0});
    }
    const size_t ring_slot = fuse_paused || file->RingFd() < 0 ? kNoSlot : fds.size();
    if (ring_slot != kNoSlot) {
      fds.push_back({file->RingFd(), POLLIN, 0});
    }
    const size_t conn_slot = queue->HasConnection() ? fds.size() : kNoSlot;
    if (queue->HasConnection()) {
      fds.push_back({queue->Fd(), queue->Events(), 0});
    }
    const size_t extra_from = fds.size();
    if (extra_fds) {
      for (int fd : extra_fds()) {
        fds.push_back({fd, POLLIN, 0});
      }
    }
    file->Flush();  // The replies of the last turn, in one system call.
    if (poll(fds.data(), fds.size(), -1) < 0) {
      return errno == EINTR ? absl::StatusOr<Turn>(Turn::kGoOn) : ErrnoStatus(errno, "poll");
    }
    if (fds[0].revents != 0) {
      return Turn::kStop;
    }
    if (conn_slot != kNoSlot && fds[conn_slot].revents != 0) {
      queue->Service(fds[conn_slot].revents);
    }
    if (fds[2].revents != 0) {
      std::array<char, 128> info{};  // Drain the signalfd (struct signalfd_siginfo is 128 bytes).
      while (read(d.refresh, info.data(), info.size()) > 0) {
      }
      queue->RefreshCapacity();
    }
    if (fds[1].revents != 0) {
      uint64_t expirations = 0;
      (void)!read(d.timer, &expirations, sizeof(expirations));
      queue->OnTick();
      ShowSilence();
      Alive();
    }
    if (fuse_slot != kNoSlot && fds[fuse_slot].revents != 0 && !ServeFuse()) {
      return Turn::kFuseEnded;
    }
    if (ring_slot != kNoSlot && fds[ring_slot].revents != 0 && !file->ServeRing()) {
      return Turn::kFuseEnded;
    }
    for (size_t i = extra_from; i < fds.size(); ++i) {
      if (fds[i].revents != 0 && on_extra) {
        on_extra(fds[i].fd);
      }
    }
    return Turn::kGoOn;
  }

  // A target silent for a tick or more is on the status at once (silent_since_ns), and off it
  // when it answers again: a successor of a process killed meanwhile counts the replacement
  // timeout from there, not from its own start.
  void ShowSilence() {
    const auto silent = queue->SilentSince();
    const auto now = std::chrono::steady_clock::now();
    const uint64_t since =
        silent && now - *silent >= std::chrono::seconds(kTickSeconds)
            ? static_cast<uint64_t>(
                  std::chrono::duration_cast<std::chrono::nanoseconds>(silent->time_since_epoch())
                      .count())
            : 0;
    if ((since == 0) != (board.status.silent_since_ns == 0)) {
      board.status.silent_since_ns = since;
      board.Publish(
          board.status.state,
          since != 0 ? "serving; the target has not answered for a second or more" : "serving");
    }
  }

  void CheckIdle() {
    if (drained && (queue->Idle() || std::chrono::steady_clock::now() >= drain_deadline)) {
      std::exchange(drained, nullptr)();
    }
  }

  // Answers what the kernel has queued (after the resend an adopted connection needs). False
  // once the connection has ended.
  bool ServeFuse() {
    if (resend_pending) {
      resend_pending = false;
      if (const absl::Status resent = file->ResendUnanswered(); !resent.ok()) {
        // Old kernels: what the earlier server took stays unanswered (those I/Os wait until
        // the connection ends); everything else is served. The status says so.
        board.Publish(board.status.state,
                      absl::StrCat(board.status.message, "; ", resent.message()));
      }
    }
    const bool served = file->Serve();
    ShowFuseMode();
    return served;
  }

  // Publishes how FUSE requests come, once it changed (the ring starts after INIT).
  void ShowFuseMode() {
    std::string mode = file->FuseMode();
    if (mode == "classic" && !file->RingRefusal().empty()) {
      mode = absl::StrCat("classic (io_uring: ", file->RingRefusal(), ")");
    }
    if (mode != board.status.fuse_mode) {
      board.status.fuse_mode = std::move(mode);
      board.Publish(board.status.state, board.status.message);
    }
  }

  void Alive() const {
    Beat(counters);
    if (on_alive) {
      on_alive();
    }
  }

  // A capacity read at login or on a refresh: a larger LUN grows the file; a smaller one (or
  // another block size) fails closed like another LUN, before the filesystem on it sees errors
  // past the new end. False when refused.
  bool TakeCapacity(const iscsi::LunCapacity& capacity) {
    if (file == nullptr || board.status.state == ServerState::kCapacityShrunk) {
      return board.status.state != ServerState::kCapacityShrunk;
    }
    const iscsi::LunCapacity& staged = file->Capacity();
    if (capacity.block_size != staged.block_size || capacity.Bytes() < staged.Bytes()) {
      board.Publish(ServerState::kCapacityShrunk,
                    absl::StrCat("the LUN is now ", capacity.Bytes(), " bytes in blocks of ",
                                 capacity.block_size, ", it was staged at ", staged.Bytes(),
                                 " in blocks of ", staged.block_size,
                                 "; refusing I/O that would miss the end of the filesystem"));
      queue->FailClosed();
      return false;
    }
    if (file->GrowTo(capacity)) {
      board.status.capacity_bytes = capacity.Bytes();
    }
    return true;
  }
};

FuseLunServer::FuseLunServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FuseLunServer::~FuseLunServer() = default;

std::string FuseLunServer::LunPath() const {
  return JoinPath(impl_->mountpoint, impl_->file_name);
}

namespace {

// The parts, wired; `ctx` may be null (Adopt: the first login is Run's).
std::unique_ptr<FuseLunServer::Impl> Wire(FuseLunServerOptions& options, iscsi::IscsiContext ctx) {
  auto impl = std::make_unique<FuseLunServer::Impl>();
  FuseLunServer::Impl* s = impl.get();
  s->mountpoint = options.mountpoint;
  s->file_name = options.file_name;
  s->counters = options.counters;
  s->on_alive = std::move(options.on_alive);
  s->board.on_status = std::move(options.on_status);
  s->board.status.portal = options.login.portal.ToString();
  s->board.status.capacity_bytes = options.capacity.Bytes();
  s->board.status.reservation_generation = options.reservation_generation;
  s->board.status.reservation_key = options.reservation_current;
  s->pool.Reserve(options.reserved_buffers);
  s->queue = std::make_unique<CommandQueue>(
      CommandQueueOptions{
          .lun = options.login.lun,
          .block_size = options.capacity.block_size,
          .identity = options.identity,
          .replacement_timeout = options.replacement_timeout,
          .counters = options.counters,
          .on_capacity = [s](const iscsi::LunCapacity& capacity) { s->TakeCapacity(capacity); },
          .on_capacity_refreshed =
              [s] {
                ++s->board.status.capacity_refreshes;
                s->board.Publish(s->board.status.state, s->board.status.message);
              },
          .renew_every = options.reservation_renew,
          .on_renewed =
              [s](uint64_t key) {
                s->board.status.reservation_key = key;
                s->board.Publish(s->board.status.state, s->board.status.message);
              },
          .on_fenced =
              [s] {
                s->board.Publish(ServerState::kFenced,
                                 "the target refused a write with RESERVATION CONFLICT: another "
                                 "node holds the LUN's reservation (it took the volume over); "
                                 "every I/O fails with EIO, and this node never registers again "
                                 "on its own");
              },
      },
      std::move(ctx));
  s->queue->SetReservationKey(options.reservation_current);
  return impl;
}

void AddReconnector(FuseLunServer::Impl* s, FuseLunServerOptions& options) {
  s->reconnector = std::make_unique<Reconnector>(
      ReconnectorOptions{
          .portals = std::move(options.portals),
          .login = std::move(options.login),
          .identity = std::move(options.identity),
          .replacement_timeout = options.replacement_timeout,
          .on_capacity =
              [s](const iscsi::LunCapacity& capacity) { return s->TakeCapacity(capacity); },
          .lost_since = options.lost_since,
          .reservation_key = options.reservation_key,
      },
      *s->queue, s->board);
}

// An adopted connection whose earlier server ran a ring delivers requests only through a ring:
// this server registers its own. What the earlier ring held when its server died is not
// resent (FUSE_NOTIFY_RESEND covers /dev/fuse only): those requests wait until the connection
// ends.
void AdoptRing(FuseLunServer::Impl* s, const FuseLunServerOptions& options) {
  s->file->CountRingHeldIn(s->counters != nullptr ? &s->counters->ring_held : nullptr);
  if (options.fuse_io_uring) {
    (void)s->file->StartRing();
    s->ShowFuseMode();
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<FuseLunServer>> FuseLunServer::Create(
    FuseLunServerOptions options, std::unique_ptr<iscsi::Connection> connection) {
  std::unique_ptr<Impl> impl = Wire(options, connection->ReleaseContext());
  Impl* s = impl.get();
  SH_ASSIGN_OR_RETURN(s->file, LunFile::Mount(options.mountpoint, options.file_name,
                                              options.capacity, *s->queue, s->pool));
  s->file->WantRing(options.fuse_io_uring);
  s->file->CountRingHeldIn(s->counters != nullptr ? &s->counters->ring_held : nullptr);
  AddReconnector(s, options);
  return std::unique_ptr<FuseLunServer>(new FuseLunServer(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<FuseLunServer>> FuseLunServer::Adopt(FuseLunServerOptions options,
                                                                    UniqueFd fuse) {
  std::unique_ptr<Impl> impl = Wire(options, iscsi::IscsiContext());
  Impl* s = impl.get();
  SH_ASSIGN_OR_RETURN(FuseConnection connection,
                      FuseConnection::Adopt(std::move(fuse), options.mountpoint));
  s->file = std::make_unique<LunFile>(std::move(connection), options.file_name, options.capacity,
                                      *s->queue, s->pool);
  AdoptRing(s, options);
  s->resend_pending = true;
  s->queue->RequestReconnect("taking over from a session process that ended");
  AddReconnector(s, options);
  return std::unique_ptr<FuseLunServer>(new FuseLunServer(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<FuseLunServer>> FuseLunServer::AdoptConnected(
    FuseLunServerOptions options, UniqueFd fuse, std::unique_ptr<iscsi::Connection> connection) {
  std::unique_ptr<Impl> impl = Wire(options, connection->ReleaseContext());
  Impl* s = impl.get();
  SH_ASSIGN_OR_RETURN(FuseConnection adopted,
                      FuseConnection::Adopt(std::move(fuse), options.mountpoint));
  s->file = std::make_unique<LunFile>(std::move(adopted), options.file_name, options.capacity,
                                      *s->queue, s->pool);
  AdoptRing(s, options);
  s->resend_pending = true;
  AddReconnector(s, options);
  return std::unique_ptr<FuseLunServer>(new FuseLunServer(std::move(impl)));
}

absl::StatusOr<UniqueFd> FuseLunServer::DuplicateFuse() const {
  return impl_->file->connection().Duplicate();
}

void FuseLunServer::SetExtraPoll(std::function<std::vector<int>()> fds,
                                 std::function<void(int)> on_readable) {
  impl_->extra_fds = std::move(fds);
  impl_->on_extra = std::move(on_readable);
}

void FuseLunServer::PauseFuse(std::chrono::milliseconds bound, std::function<void()> drained) {
  impl_->fuse_paused = true;
  impl_->drain_deadline = std::chrono::steady_clock::now() + bound;
  impl_->drained = std::move(drained);
}

void FuseLunServer::ResumeFuse() {
  impl_->fuse_paused = false;
  impl_->drained = nullptr;
}

void FuseLunServer::EndKeepingMount() {
  impl_->ending = true;
}

absl::Status FuseLunServer::Run(int stop_fd, int refresh_fd) {
  Impl& s = *impl_;
  UniqueFd timer(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!timer) {
    return ErrnoStatus(errno, "timerfd_create");
  }
  itimerspec spec{};
  spec.it_interval.tv_sec = kTickSeconds;
  spec.it_value.tv_sec = kTickSeconds;
  if (timerfd_settime(timer.Get(), 0, &spec, nullptr) != 0) {
    return ErrnoStatus(errno, "timerfd_settime");
  }
  bool fuse_ended = false;  // The kernel ended the connection (not our stop).
  // While logging in again: waits for a stop, and answers FUSE requests once they fail anyway.
  const Reconnector::Wait wait = [&s, &fuse_ended, stop_fd](std::chrono::milliseconds ms,
                                                            bool serve_fuse) {
    s.Alive();
    s.file->Flush();
    std::array<pollfd, 2> fds{{{stop_fd, POLLIN, 0}, {s.file->Fd(), POLLIN, 0}}};
    const nfds_t n = serve_fuse && !s.fuse_paused ? 2 : 1;
    if (poll(fds.data(), n, static_cast<int>(ms.count())) < 0 && errno != EINTR) {
      return false;
    }
    if (fds[0].revents != 0) {
      return false;
    }
    fuse_ended = n == 2 && fds[1].revents != 0 && !s.ServeFuse();
    return !fuse_ended;
  };
  if (!s.queue->ReconnectRequested()) {
    s.board.Publish(ServerState::kUp, "serving");  // Adopted: once logged in.
  }
  const Impl::Descriptors descriptors{stop_fd, refresh_fd, timer.Get()};
  std::vector<pollfd> fds;
  while (!s.ending) {
    Beat(s.counters);  // At least once a tick: the agent reads it as the sign of life.
    if (s.resend_pending && !s.queue->ReconnectRequested() && !s.fuse_paused && !s.ServeFuse()) {
      fuse_ended = true;  // Adopted and logged in: the resend comes before anything else.
      break;
    }
    if (s.queue->ReconnectRequested()) {
      if (!s.reconnector->Reconnect(wait)) {
        break;
      }
      if (s.resend_pending && !s.queue->ReconnectRequested()) {
        continue;  // Logged in: the resend now, not after the next tick.
      }
    }
    s.CheckIdle();
    if (s.ending) {
      break;
    }
    SH_ASSIGN_OR_RETURN(const Impl::Turn turn, s.WaitAndServe(descriptors, fds));
    if (turn == Impl::Turn::kStop) {
      break;
    }
    if (turn == Impl::Turn::kFuseEnded) {
      fuse_ended = true;
      break;
    }
  }
  if (s.ending) {
    return absl::OkStatus();  // Handed over: what was taken is answered, the mount stays.
  }
  // Stopping: answer whatever waits so the kernel is not left waiting.
  s.queue->FailWaiting();
  if (fuse_ended) {
    return absl::AbortedError(
        absl::StrCat("the FUSE connection of '", s.mountpoint,
                     "' ended under the session (aborted through /sys/fs/fuse/connections, or "
                     "the mount forced away): I/O to the volume fails; unpublish and unstage it, "
                     "then stage it again"));
  }
  return absl::OkStatus();
}

}  // namespace stagehand::session

#include "session/session_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <absl/cleanup/cleanup.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "base/build_id.h"
#include "base/file_io.h"
#include "base/paths.h"
#include "base/process.h"
#include "base/service_notify.h"
#include "base/unique_fd.h"
#include "iscsi/libiscsi_connection.h"
#include "iscsi/reservation_claim.h"
#include "iscsi/state_conversions.h"
#include "proto/state.pb.h"
#include "session/fuse_lun_server.h"
#include "session/handover.h"
#include "session/io_request.h"
#include "session/keeper.h"
#include "session/keeper_watch.h"
#include "session/process_setup.h"
#include "session/protocol.h"
#include "session/session_login.h"

namespace stagehand::session {
namespace {

using state::v1::SessionConfig;
using state::v1::SessionHandover;
using state::v1::SessionStatus;

// How long a process handing its volume over waits for the requests it took to be answered
// before it lets go anyway (the kernel resends the rest to the successor).
constexpr auto kDrainBound = std::chrono::seconds(5);

SessionStatus::State ToProtoState(ServerState s) {
  switch (s) {
    case ServerState::kUp:
      return SessionStatus::UP;
    case ServerState::kReconnecting:
      return SessionStatus::RECONNECTING;
    case ServerState::kIdentityMismatch:
      return SessionStatus::IDENTITY_MISMATCH;
    case ServerState::kCapacityShrunk:
      return SessionStatus::CAPACITY_SHRUNK;
    case ServerState::kFenced:
      return SessionStatus::FENCED;
  }
  return SessionStatus::STATE_UNKNOWN;
}

class Session {
 public:
  Session(SessionConfig config, int ready_fd) : config_(std::move(config)), ready_fd_(ready_fd) {
    const ReclaimGuard guard = KeepOutOfReclaim();
    status_.set_io_flusher(guard.io_flusher);
    status_.set_memory_locked(guard.memory_locked);
  }

  // First start: the config came over the pipe; logs in and mounts.
  int Run() { return Serve(Start()); }

  // A successor: serves the FUSE connection of a process that ended, from what it left with
  // the manager.
  int RunTakeover(const SessionHandover& handover, UniqueFd fuse) {
    return Serve(TakeOver(handover, std::move(fuse)));
  }

  // An upgrade: takes the volume over from the process serving it now, through its handover
  // socket; until that process lets go, it serves on and nothing here touches the volume.
  int RunUpgrade() { return Serve(Upgrade()); }

 private:
  std::string StatusPath() const { return RuntimePath(config_.runtime_dir(), kStatusFile); }

  void Ready() {
    status_.set_pid(getpid());
    if (ready_fd_ >= 0) {
      (void)WriteFully(ready_fd_, FrameReadyMessage(status_.SerializeAsString()));
      ReplaceWithDevNull(ready_fd_);
      ready_fd_ = -1;
    }
  }

  void OnStatus(const ServerStatus& s) {
    status_.set_state(ToProtoState(s.state));
    status_.set_message(s.message);
    status_.set_portal(s.portal);
    status_.set_reconnects(s.reconnects);
    status_.set_capacity_bytes(s.capacity_bytes);
    status_.set_capacity_refreshes(s.capacity_refreshes);
    status_.set_io_failing(s.io_failing);
    status_.set_lost_since_ns(s.lost_since_ns);
    status_.set_silent_since_ns(s.silent_since_ns);
    status_.set_reservation_generation(s.reservation_generation);
    status_.set_reservation_key(s.reservation_key);
    if (s.fuse_mode != status_.fuse_mode()) {
      // Its unit's journal (the keeper's stderr without systemd).
      std::fprintf(stderr, "stagehand-session: volume %s: FUSE requests: %s\n",
                   config_.volume_id().c_str(), s.fuse_mode.c_str());
    }
    status_.set_fuse_mode(s.fuse_mode);
    status_.set_pid(getpid());
    (void)WriteFileAtomically(StatusPath(), status_.SerializeAsString(), 0600);
  }

  int Serve(const absl::Status& started) {
    if (!started.ok()) {
      status_.set_state(SessionStatus::FAILED);
      status_.set_message(std::string(started.message()));
      status_.set_error_code(static_cast<int>(started.code()));
      status_.set_holder_key(iscsi::HolderKeyOf(started));
      status_.set_holder_node_keys(iscsi::HolderNodeKeysOf(started));
      Ready();
      return 1;
    }
    WatchKeeper();
    absl::Status status = server_->Run(stop_fd_.Get(), refresh_fd_.Get());
    handover_.reset();
    server_.reset();  // Unmounts FUSE (unless handed over), logs out.
    if (status.ok() && handed_over_) {
      return 0;  // The successor serves; the status file and the counters are its own now.
    }
    if (status.code() == absl::StatusCode::kAborted) {
      // The volume is dead for good: the last status says why, for the agent's health checks
      // (the process is gone), until the volume is unstaged.
      status_.set_state(SessionStatus::FUSE_ABORTED);
      status_.set_message(std::string(status.message()));
      (void)WriteFileAtomically(StatusPath(), status_.SerializeAsString(), 0600);
      return kExitFuseAborted;
    }
    if (status.ok()) {
      ReleaseReservation();
    }
    (void)RemoveFileIfExists(StatusPath());
    (void)RemoveFileIfExists(RuntimePath(config_.runtime_dir(), kCountersFile));
    return status.ok() ? 0 : 1;
  }

  // A deliberate stop (the volume's unstage) gives the LUN's reservation up, unless another node
  // holds it now; a crash never does (the next process of this node takes it back).
  void ReleaseReservation() {
    if (config_.reservation_key() != 0 && status_.state() != SessionStatus::FENCED) {
      ReleaseAtStop(config_);
    }
    ReleasePending(/*serving_pid=*/0);
  }

  // Signals: SIGUSR1 (capacity refresh) always, SIGTERM/SIGINT (clean stop) from the caller's
  // point on.
  absl::Status ReadSignals(bool stop_too) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, stop_too ? SIGTERM : SIGUSR1);
    if (stop_too) {
      sigaddset(&set, SIGINT);
    }
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    UniqueFd& fd = stop_too ? stop_fd_ : refresh_fd_;
    fd.Reset(signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    return fd ? absl::OkStatus() : ErrnoStatus(errno, "signalfd");
  }

  // Who this process is (and its keeper, if one restarts it), on disk before anything else.
  absl::Status Introduce(const std::string& message, bool write = true) {
    status_.set_build(OwnBuildId());
    status_.set_fuse_mode("classic");
    status_.set_unit(config_.unit());
    status_.set_state(SessionStatus::STARTING);
    status_.set_message(message);
    status_.set_pid(getpid());
    status_.set_start_time(ProcessStartTime(getpid()));
    status_.set_volume_id(config_.volume_id());
    status_.set_unreserved(config_.reservation_unsupported());
    // NOLINTNEXTLINE(concurrency-mt-unsafe): at start, before any thread.
    if (const char* keeper = getenv(kKeeperVariable); keeper != nullptr) {
      int pid = 0;
      if (absl::SimpleAtoi(keeper, &pid) && pid > 0) {
        status_.set_keeper_pid(pid);
        status_.set_keeper_start_time(ProcessStartTime(pid));
      }
    }
    return write ? WriteFileAtomically(StatusPath(), status_.SerializeAsString(), 0600)
                 : absl::OkStatus();
  }

  // The options of the server, but for what only a login can tell.
  FuseLunServerOptions ServerOptions(const iscsi::LoginParams& params,
                                     std::vector<iscsi::Portal> portals) {
    FuseLunServerOptions options;
    options.portals = std::move(portals);
    options.login = params;
    options.mountpoint = RuntimePath(config_.runtime_dir(), kMountDir);
    options.counters = counters_.get();
    options.on_status = [this](const ServerStatus& s) { OnStatus(s); };
    options.on_alive = Pinger();
    options.reserved_buffers = BufferPool::kMaxSpare;
    options.fuse_io_uring = config_.fuse_io_uring();
    options.replacement_timeout = std::chrono::seconds(
        config_.replacement_timeout_seconds() == 0 ? 120 : config_.replacement_timeout_seconds());
    options.reservation_key = config_.reservation_key();
    options.reservation_generation = status_.reservation_generation();
    options.reservation_current = status_.reservation_key();
    options.reservation_renew = std::chrono::seconds(config_.reservation_renew_seconds());
    return options;
  }

  // The watchdog ping for the manager (systemd or the keeper), at most every 200 ms; empty
  // without a watchdog. Logins and reads call it while they wait (up to 10 s a step) for a
  // target that does not answer: the manager must not take that for a hung process.
  static std::function<void()> Pinger() {
    if (WatchdogIntervalUsec() == 0) {
      return {};
    }
    return [last = std::chrono::steady_clock::time_point()]() mutable {
      const auto now = std::chrono::steady_clock::now();
      if (now - last >= std::chrono::milliseconds(200)) {
        last = now;
        (void)NotifyServiceManager("WATCHDOG=1");
      }
    };
  }

  // Leaves what a successor needs with the manager (systemd's file descriptor store, or the
  // keeper): the config and the LUN as checked, and the /dev/fuse descriptor. Without a manager
  // nothing is kept, and a process that dies takes the volume's I/O with it.
  void KeepForSuccessor() {
    auto fds = HandoverFds();
    if (!fds.ok()) {
      return;
    }
    const std::array<int, 1> handover_fd{fds->first.Get()};
    const std::array<int, 1> fuse_fd{fds->second.Get()};
    (void)NotifyServiceManager("FDSTORE=1\nFDNAME=handover", handover_fd);
    (void)NotifyServiceManager("FDSTORE=1\nFDNAME=fuse", fuse_fd);
  }

  // What a successor needs: a sealed memory file with the config and the LUN as checked, and
  // a duplicate of /dev/fuse.
  absl::StatusOr<std::pair<UniqueFd, UniqueFd>> HandoverFds() const {
    SessionHandover handover;
    *handover.mutable_config() = config_;
    iscsi::ToProto(identity_, handover.mutable_identity());
    handover.set_capacity_bytes(capacity_.Bytes());
    handover.set_block_size(capacity_.block_size);
    SH_ASSIGN_OR_RETURN(UniqueFd memory, SealedMemoryFile("stagehand-session-handover",
                                                          handover.SerializeAsString()));
    SH_ASSIGN_OR_RETURN(UniqueFd fuse, server_->DuplicateFuse());
    return std::make_pair(std::move(memory), std::move(fuse));
  }

  // Listens for a successor of another build (handover.h) from the serving loop.
  void OfferHandover() {
    const std::string path = RuntimePath(config_.runtime_dir(), kHandoverSocket);
    auto server = HandoverServer::Listen(
        path, {.offer = [this]() -> absl::StatusOr<std::pair<UniqueFd, UniqueFd>> {
                 if (status_.fuse_mode() == "io_uring") {
                   // What its ring holds would be lost.
                   return absl::FailedPreconditionError(
                       "a session on FUSE over io_uring cannot hand over");
                 }
                 return HandoverFds();
               },
               .take =
                   [this](std::function<void()> drained) {
                     server_->PauseFuse(kDrainBound, std::move(drained));
                   },
               .resume = [this] { server_->ResumeFuse(); },
               .stored =
                   [this] {
                     handed_over_ = true;
                     server_->EndKeepingMount();
                   }});
    if (!server.ok()) {
      return;  // No upgrade in place for this process; it serves as ever.
    }
    handover_ = std::move(*server);
    status_.set_handover_socket(path);
  }

  // Watches the keeper (session/keeper_watch.h) from the serving loop, beside the handover
  // socket's descriptors.
  void WatchKeeper() {
    keeper_watch_ = KeeperWatch::FromEnvironment();
    if (keeper_watch_.LostAlready()) {
      ReplaceKeeper();
    }
    server_->SetExtraPoll(
        [this] {
          std::vector<int> fds = handover_ ? handover_->Fds() : std::vector<int>{};
          if (keeper_watch_.Fd() >= 0) {
            fds.push_back(keeper_watch_.Fd());
          }
          return fds;
        },
        [this](int fd) {
          if (fd == keeper_watch_.Fd()) {
            ReplaceKeeper();
          } else if (handover_) {
            handover_->OnReadable(fd);
          }
        });
  }

  // The keeper died: one that adopts this process takes its place, handed what a successor
  // needs. Until one runs, the status says the volume is unsupervised.
  void ReplaceKeeper() {
    const int dead = static_cast<int>(status_.keeper_pid());
    absl::StatusOr<int> keeper = absl::UnavailableError("nothing to hand over");
    if (auto fds = HandoverFds(); fds.ok()) {
      keeper = keeper_watch_.Replace(std::move(fds->first), std::move(fds->second));
    }
    if (keeper.ok()) {
      std::fprintf(stderr,
                   "stagehand-session: volume %s: keeper %d died; keeper %d keeps this process "
                   "(%d) now\n",
                   config_.volume_id().c_str(), dead, *keeper, getpid());
      status_.set_keeper_pid(*keeper);
      status_.set_keeper_start_time(ProcessStartTime(*keeper));
      status_.clear_unsupervised();
    } else {
      std::fprintf(
          stderr, "stagehand-session: volume %s: keeper %d died; no keeper replaces it: %s\n",
          config_.volume_id().c_str(), dead, std::string(keeper.status().message()).c_str());
      status_.set_keeper_pid(0);
      status_.set_keeper_start_time(0);
      status_.set_unsupervised(absl::StrCat(
          "its keeper (pid ", dead,
          ") died and no keeper could be started in its place: ", keeper.status().message()));
    }
    (void)WriteFileAtomically(StatusPath(), status_.SerializeAsString(), 0600);
  }

  absl::Status TakeOver(const SessionHandover& handover, UniqueFd fuse) {
    // What the process that died last said: if it was reconnecting, the replacement timeout
    // keeps running from when its connection was lost; if its target had gone silent, from
    // then; otherwise it is lost now.
    SessionStatus last;
    auto last_raw = ReadFileToString(StatusPath());
    const bool read = last_raw.ok() && last.ParseFromString(*last_raw);
    const uint64_t since_ns = !read                       ? 0
                              : last.lost_since_ns() != 0 ? last.lost_since_ns()
                                                          : last.silent_since_ns();
    const auto lost_since =
        since_ns != 0 ? std::min(std::chrono::steady_clock::now(),
                                 std::chrono::steady_clock::time_point(
                                     std::chrono::nanoseconds(static_cast<int64_t>(since_ns))))
                      : std::chrono::steady_clock::now();
    SH_RETURN_IF_ERROR(ReadSignals(/*stop_too=*/false));
    SH_RETURN_IF_ERROR(ReadSignals(/*stop_too=*/true));
    if (read) {  // Before this process replaces the counters file, and on its first status.
      status_.set_lost_ring_requests(
          LostRingRequests(last, ReadCounters(RuntimePath(config_.runtime_dir(), kCountersFile))));
    }
    SH_RETURN_IF_ERROR(
        Introduce("taking over the FUSE connection of a session process that ended"));
    status_.set_took_over(true);
    // The reconnector's claim starts from the generation of the last claim.
    status_.set_reservation_generation(last.reservation_generation());
    if (status_.lost_ring_requests() > last.lost_ring_requests()) {
      std::fprintf(stderr,
                   "stagehand-session: volume %s: session process %d died holding FUSE requests "
                   "in its io_uring ring, which the kernel does not resend: I/O waiting for them "
                   "waits until the FUSE connection is aborted\n",
                   config_.volume_id().c_str(), last.pid());
    }
    SH_ASSIGN_OR_RETURN(counters_,
                        CountersFile::Create(RuntimePath(config_.runtime_dir(), kCountersFile)));
    std::vector<iscsi::Portal> portals;
    const iscsi::LoginParams params = LoginParamsFor(config_, Pinger(), &portals);
    FuseLunServerOptions options = ServerOptions(params, portals);
    identity_ = iscsi::FromProto(handover.identity());
    capacity_.block_size = handover.block_size();
    capacity_.blocks =
        handover.block_size() == 0 ? 0 : handover.capacity_bytes() / handover.block_size();
    options.identity = identity_;
    options.capacity = capacity_;
    options.lost_since = lost_since;
    // The connection delivers through a ring only if the process before ran one.
    options.fuse_io_uring = last.fuse_mode() == "io_uring";
    *status_.mutable_identity() = handover.identity();
    status_.set_capacity_bytes(handover.capacity_bytes());
    status_.set_block_size(handover.block_size());
    SH_ASSIGN_OR_RETURN(server_, FuseLunServer::Adopt(std::move(options), std::move(fuse)));
    status_.set_lun_file(server_->LunPath());
    ReleasePending(/*serving_pid=*/0);
    OfferHandover();
    Ready();
    return absl::OkStatus();
  }

  // The reservation a successor asked to change the writer (SessionConfig::writer_change)
  // serves under: the one of its `asked` config for a claim, none for a release.
  void ApplyWriterChange(const SessionConfig& asked) {
    if (asked.writer_change() == SessionConfig::WRITER_RELEASE) {
      if (config_.reservation_key() != 0) {
        config_.set_release_key(config_.reservation_key());
      }
      config_.set_reservation_key(0);
      config_.set_reservation_unsupported(false);
    } else if (asked.writer_change() == SessionConfig::WRITER_CLAIM &&
               config_.reservation_key() == 0) {
      config_.set_release_key(0);  // The claim below takes the node's registrations over.
      config_.set_reservation_key(asked.reservation_key());
      config_.set_reservation_renew_seconds(asked.reservation_renew_seconds());
      config_.set_takeover_key(asked.takeover_key());
      config_.set_takeover_node_keys(asked.takeover_node_keys());
      config_.set_reservation_optional(asked.reservation_optional());
      config_.set_reservation_unsupported(false);
    }
  }

  // A first claim of the LUN on `conn` (SessionConfig::WRITER_CLAIM of a volume served
  // without one): the process it replaces reads on meanwhile, and its writes are refused by
  // the target from here on (it is not registered).
  absl::Status ClaimAsWriter(iscsi::Connection& conn) {
    SH_ASSIGN_OR_RETURN(
        const iscsi::Claim claim,
        ClaimForVolume(conn, config_.reservation_key(), config_.takeover_key(),
                       config_.takeover_node_keys(), config_.reservation_optional()));
    config_.set_reservation_key(claim.key == 0 ? 0 : config_.reservation_key());
    config_.set_reservation_unsupported(claim.key == 0);
    status_.set_unreserved(claim.key == 0);
    status_.set_reservation_generation(claim.generation);
    status_.set_reservation_key(claim.key);
    status_.set_took_over_from(claim.took_over_from);
    return absl::OkStatus();
  }

  // SessionConfig::WRITER_RELEASE: once the process that held the LUN has ended (its last
  // renewal cannot follow the release), gives up the node's reservation (config_.release_key)
  // from a login of its own. What fails is logged and tried again at the next start and at the
  // stop; meanwhile nothing renews that key, and other nodes take it over after the takeover
  // time.
  void ReleasePending(int serving_pid) {
    if (config_.reservation_key() != 0 || config_.release_key() == 0) {
      return;
    }
    if (serving_pid > 0 && !WaitForExit(serving_pid, std::chrono::seconds(5))) {
      std::fprintf(stderr,
                   "stagehand-session: volume %s: the process that held the LUN's reservation "
                   "(%d) has not ended; it is released anyway\n",
                   config_.volume_id().c_str(), serving_pid);
    }
    if (absl::Status released = ReleaseForVolume(config_, config_.release_key()); !released.ok()) {
      std::fprintf(stderr,
                   "stagehand-session: volume %s: cannot give up the LUN's reservation yet: %s; "
                   "tried again at the next start and at the stop; another node can write to "
                   "it once this node's key has stood still for the takeover time, or is "
                   "released (stagehandctl iscsi reservation)\n",
                   config_.volume_id().c_str(), std::string(released.message()).c_str());
      return;
    }
    config_.set_release_key(0);
  }

  absl::Status Upgrade() {
    const std::string unit = config_.unit();
    const SessionConfig asked = config_;  // Besides the handover: a change of writer.
    const std::string path = RuntimePath(config_.runtime_dir(), kHandoverSocket);
    SH_ASSIGN_OR_RETURN(HandoverClient client, HandoverClient::Offer(path));
    SessionHandover handover;
    auto raw = ReadWholeFd(client.handover().Get());
    if (!raw.ok() || !handover.ParseFromString(*raw)) {
      return absl::InternalError("the serving session process sent an unreadable handover");
    }
    config_ = handover.config();
    config_.set_unit(unit);                           // This process's own.
    const uint64_t held = config_.reservation_key();  // What the serving process holds.
    ApplyWriterChange(asked);
    SH_RETURN_IF_ERROR(ReadSignals(/*stop_too=*/false));
    // Nothing is written to the status file until the volume is ours: the serving process
    // still owns it.
    SH_RETURN_IF_ERROR(Introduce("taking over from a session process of another build",
                                 /*write=*/false));
    status_.set_took_over(true);
    identity_ = iscsi::FromProto(handover.identity());
    capacity_.block_size = handover.block_size();
    capacity_.blocks =
        handover.block_size() == 0 ? 0 : handover.capacity_bytes() / handover.block_size();
    std::vector<iscsi::Portal> portals;
    iscsi::LoginParams params = LoginParamsFor(config_, Pinger(), &portals);
    SH_ASSIGN_OR_RETURN(std::unique_ptr<iscsi::Connection> conn, LoginAnyPortal(portals, &params));
    SH_ASSIGN_OR_RETURN(iscsi::LunIdentity identity, conn->ReadIdentity());
    SH_RETURN_IF_ERROR(iscsi::CheckSameLun(identity_, identity));
    SH_ASSIGN_OR_RETURN(iscsi::LunCapacity capacity, conn->ReadCapacity());
    if (capacity.block_size != capacity_.block_size || capacity.Bytes() < capacity_.Bytes()) {
      return absl::FailedPreconditionError(
          "the LUN is smaller than the volume was staged with (or has another block size)");
    }
    capacity_ = capacity;
    SessionStatus serving;
    if (auto text = ReadFileToString(StatusPath()); !text.ok() || !serving.ParseFromString(*text)) {
      serving.Clear();
    }
    bool claimed = false;
    if (config_.reservation_key() != 0 && held != 0) {
      // Registered beside the serving process, which keeps its own registration until it lets
      // go; the next reconnect's claim removes what is left of it.
      SH_ASSIGN_OR_RETURN(const uint64_t joined,
                          iscsi::JoinReservation(*conn, config_.reservation_key()));
      status_.set_reservation_key(joined);
      status_.set_reservation_generation(serving.reservation_generation());
    } else if (config_.reservation_key() != 0) {
      SH_RETURN_IF_ERROR(ClaimAsWriter(*conn));
      claimed = config_.reservation_key() != 0;
    }
    // A claim made here is given up again if this process does not get to serve.
    absl::Cleanup release = [this, claimed] {
      if (claimed) {
        ReleaseReservation();
      }
    };
    SH_RETURN_IF_ERROR(ReadSignals(/*stop_too=*/true));
    // The serving process answers what it took and stops; from here on the volume is ours.
    SH_RETURN_IF_ERROR(client.Take(kDrainBound + std::chrono::seconds(5)));
    SH_ASSIGN_OR_RETURN(counters_,
                        CountersFile::Create(RuntimePath(config_.runtime_dir(), kCountersFile)));
    FuseLunServerOptions options = ServerOptions(params, portals);
    options.identity = identity_;
    options.capacity = capacity_;
    SH_ASSIGN_OR_RETURN(server_,
                        FuseLunServer::AdoptConnected(std::move(options), std::move(client.fuse()),
                                                      std::move(conn)));
    KeepForSuccessor();
    client.Stored();
    std::move(release).Cancel();
    ReleasePending(static_cast<int>(serving.pid()));
    iscsi::ToProto(identity_, status_.mutable_identity());
    status_.set_capacity_bytes(capacity_.Bytes());
    status_.set_block_size(capacity_.block_size);
    status_.set_lun_file(server_->LunPath());
    status_.set_portal(params.portal.ToString());
    status_.set_state(SessionStatus::UP);
    status_.set_message("serving");
    SH_RETURN_IF_ERROR(WriteFileAtomically(StatusPath(), status_.SerializeAsString(), 0600));
    OfferHandover();
    Ready();
    return absl::OkStatus();
  }

  absl::Status Start() {
    SH_RETURN_IF_ERROR(ReadSignals(/*stop_too=*/false));
    if (config_.portals().empty()) {
      return absl::InvalidArgumentError("session config has no portal");
    }
    // Who this process is, on disk before the login: a crash of the agent while the login
    // runs must leave a process that the next teardown can find and stop, not a second one
    // next to it on the same FUSE mount point.
    SH_RETURN_IF_ERROR(Introduce("logging in"));
    std::vector<iscsi::Portal> portals;
    iscsi::LoginParams params = LoginParamsFor(config_, Pinger(), &portals);
    SH_ASSIGN_OR_RETURN(std::unique_ptr<iscsi::Connection> conn, LoginAnyPortal(portals, &params));
    SH_ASSIGN_OR_RETURN(iscsi::LunIdentity identity, conn->ReadIdentity());
    iscsi::ToProto(identity, status_.mutable_identity());
    SH_RETURN_IF_ERROR(
        iscsi::CheckExpectedIdentity(identity, config_.expected_wwn(), config_.expected_serial()));
    SH_ASSIGN_OR_RETURN(iscsi::LunCapacity capacity, conn->ReadCapacity());
    status_.set_capacity_bytes(capacity.Bytes());
    status_.set_block_size(capacity.block_size);
    if (config_.reservation_key() != 0) {
      // Before anything can write: the agent checks, formats and mounts only after this.
      SH_ASSIGN_OR_RETURN(
          const iscsi::Claim claim,
          ClaimForVolume(*conn, config_.reservation_key(), config_.takeover_key(),
                         config_.takeover_node_keys(), config_.reservation_optional()));
      // Without PR support (and allowed to): no key to renew or release; successors know.
      config_.set_reservation_key(claim.key == 0 ? 0 : config_.reservation_key());
      config_.set_reservation_unsupported(claim.key == 0);
      status_.set_unreserved(claim.key == 0);
      status_.set_reservation_generation(claim.generation);
      status_.set_reservation_key(claim.key);
      status_.set_took_over_from(claim.took_over_from);
    }
    // A start that fails from here on gives the reservation up again.
    absl::Cleanup release = [this] { ReleaseReservation(); };

    // SIGTERM ends the login above at once (nothing to undo yet); from here on it is a clean
    // stop that unmounts FUSE and logs out.
    SH_RETURN_IF_ERROR(ReadSignals(/*stop_too=*/true));
    SH_ASSIGN_OR_RETURN(counters_,
                        CountersFile::Create(RuntimePath(config_.runtime_dir(), kCountersFile)));
    FuseLunServerOptions options = ServerOptions(params, portals);
    SH_RETURN_IF_ERROR(MakeDirs(options.mountpoint, 0700));
    options.identity = identity;
    options.capacity = capacity;
    identity_ = identity;
    capacity_ = capacity;
    SH_ASSIGN_OR_RETURN(server_, FuseLunServer::Create(std::move(options), std::move(conn)));
    KeepForSuccessor();
    OfferHandover();
    status_.set_lun_file(server_->LunPath());
    status_.set_portal(params.portal.ToString());
    status_.set_state(SessionStatus::UP);
    status_.set_message("serving");
    SH_RETURN_IF_ERROR(WriteFileAtomically(StatusPath(), status_.SerializeAsString(), 0600));
    std::move(release).Cancel();
    Ready();
    return absl::OkStatus();
  }

  SessionConfig config_;
  int ready_fd_;
  UniqueFd stop_fd_;
  UniqueFd refresh_fd_;
  SessionStatus status_;
  iscsi::LunIdentity identity_;  // As checked at the first login: every successor must find it.
  iscsi::LunCapacity capacity_;
  CountersFile counters_;  // Outlives server_ (declared first, destroyed last).
  std::unique_ptr<FuseLunServer> server_;
  std::unique_ptr<HandoverServer> handover_;  // Destroyed before server_.
  KeeperWatch keeper_watch_;
  bool handed_over_ = false;
};

}  // namespace

int RunSessionProcess(int config_fd, int ready_fd) {
  // The agent that started us may go away; writing to its pipes must not kill us.
  signal(SIGPIPE, SIG_IGN);
  std::map<std::string, UniqueFd> passed = TakeListenFds();
  if (passed.contains("handover") && passed.contains("fuse")) {
    auto raw = ReadWholeFd(passed["handover"].Get());
    SessionHandover handover;
    if (raw.ok() && handover.ParseFromString(*raw)) {
      Session session(handover.config(), ready_fd);
      return session.RunTakeover(handover, std::move(passed["fuse"]));
    }
    // Unreadable: nothing to take over with. Exit without a restart; the volume shows the
    // session gone.
    return 1;
  }
  auto raw = ReadToEnd(config_fd);
  ReplaceWithDevNull(config_fd);
  SessionConfig config;
  if (!raw.ok() || !config.ParseFromString(*raw)) {
    SessionStatus failed;
    failed.set_state(SessionStatus::FAILED);
    failed.set_message("cannot read the session config");
    failed.set_error_code(static_cast<int>(absl::StatusCode::kInternal));
    (void)WriteFully(ready_fd, FrameReadyMessage(failed.SerializeAsString()));
    close(ready_fd);
    return 1;
  }
  const bool upgrade = config.take_over();
  Session session(std::move(config), ready_fd);
  return upgrade ? session.RunUpgrade() : session.Run();
}

}  // namespace stagehand::session
